package dlp_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
)

// FuzzParseFile: any bytes give a File or an ErrorList, never a panic, and
// every error has a position. A file that parses runs its load balancers:
// every operation type gets servers of the balancer, or none.
func FuzzParseFile(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := dlp.Parse("f.json", data)
		if err == nil {
			if file == nil {
				t.Fatal("nil file without error")
			}
			runBalancers(t, file)
			return
		}
		var list dlp.ErrorList
		if !errors.As(err, &list) || len(list) == 0 {
			t.Fatalf("error %T %v", err, err)
		}
		for _, e := range list {
			if e.Line < 1 || e.Col < 1 {
				t.Fatalf("no position: %v", e)
			}
		}
	})
}

// FuzzCond: conditions parse or fail cleanly; DN normalisation is
// idempotent.
func FuzzCond(f *testing.F) {
	for _, s := range []string{"(user=cn=a,o=b)", "(&(user:node=o=b)(!(opr.req.typ=add)))", "(user:regex=^cn=(a|b)\\))", `(user=cn=J\C3\BCrgen+sn=x;o=y)`, "(search.req.baseObject=)"} {
		f.Add(s, "cn=A , o=B")
	}
	f.Add("(user=commonName=a,2.5.4.10=b)", "2.5.4.3=A+userid=x, organizationName=B;0.9.2342.19200300.100.1.25=c")
	f.Fuzz(func(t *testing.T, cond, dn string) {
		n := dlp.NormalizeDN(dn)
		if dlp.NormalizeDN(n) != n {
			t.Fatalf("NormalizeDN not idempotent: %q → %q → %q", dn, n, dlp.NormalizeDN(n))
		}
		c, err := dlp.ParseCond(cond)
		if err != nil {
			return
		}
		c.Match(&dlp.Ctx{User: n, Op: "search", BaseObject: n})
	})
}

func runBalancers(t *testing.T, f *dlp.File) {
	h := dlp.NewHealth(f.Defaults.OfflineRetryTimeout, nil)
	l := dlp.NewLoad(f, nil)
	bs := dlp.NewBalancers(f, h, l)
	for name, lb := range f.Balancers {
		for _, op := range []string{"bind", "search", "add", "extended", "op-0x99"} {
			for _, s := range bs.Select(name, dlp.Op{Type: op, FilterAttrs: []string{"uid", "mail"}}) {
				if !slices.ContainsFunc(lb.Routes, func(r *dlp.Route) bool { return r.Server == s }) || f.Servers[s] == nil {
					t.Fatalf("balancer %s chose %q, not one of its servers", name, s)
				}
				l.Begin(s)
			}
		}
	}
	bs.Observe()
}
