package core_test

import (
	"log/slog"
	"net"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/ldap/wire"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkRoundTrip runs one client's operations through a real core in
// front of a real slapd, and straight to that slapd, as bench/core does
// (rule forwardto(L1), log discarded): allocs/op and B/op are the core's
// (the client reuses its request bytes and reads in place), and
// -cpuprofile shows where the core's time goes.
//
//	go test -run '^$' -bench RoundTrip -benchtime 2000x ./origin/ldap/core/
func BenchmarkRoundTrip(b *testing.B) {
	l := testbed.StartSlapds(b, 1, testbed.SlapdConfig{})[0]
	host, port, _ := net.SplitHostPort(l.Addr)
	f, err := dlp.Parse("bench.json", []byte(`[
  {"object": "Defaults", "MonitorInterval": 3600},
  {"object": "LdapServer", "name": "L1", "host": "`+host+`", "port": `+port+`},
  {"object": "ProxyRule", "ruleType": "UserRouting", "name": "ALL", "condition": "(user=*)", "actions": ["forwardto(L1)"], "loadbalance": 0},
  {"object": "LdapProxy", "name": "ldapConfiguration", "rules": ["ALL"]}
]`))
	if err != nil {
		b.Fatal(err)
	}
	srv, err := core.New(core.DefaultConfig(), f, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	ln := listen(b, "127.0.0.1:0")
	serve(b, srv, ln)
	bind := wire.BindRequest(1, alice, []byte("alice-pw"))
	search := benchSearch(2)
	for _, tc := range []struct{ name, addr string }{{"core", ln.Addr().String()}, {"direct", l.Addr}} {
		for _, wl := range []string{"search", "bind+search"} {
			b.Run(tc.name+"/"+wl, func(b *testing.B) {
				c, err := net.Dial("tcp", tc.addr)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				rd := wire.NewReader(c)
				roundTrip := func(req []byte, final byte) {
					if _, err := c.Write(req); err != nil {
						b.Fatal(err)
					}
					for {
						raw, err := rd.Next()
						if err != nil {
							b.Fatal(err)
						}
						if len(raw) > 8 && raw[5] == final { // 0x30 len 0x02 0x01 id tag: ids 1 and 2 are one byte
							return
						}
					}
				}
				roundTrip(bind, wire.TagBindResponse)
				roundTrip(search, wire.TagSearchResultDone) // connects the core to slapd
				b.ReportAllocs()
				for b.Loop() {
					if wl == "bind+search" {
						roundTrip(bind, wire.TagBindResponse)
					}
					roundTrip(search, wire.TagSearchResultDone)
				}
			})
		}
	}
}

// benchSearch is bench/core's search: subtree under ou=people for
// (uid=bob), attribute cn; one entry.
func benchSearch(id byte) []byte {
	tlv := func(tag byte, parts ...[]byte) []byte {
		var v []byte
		for _, p := range parts {
			v = append(v, p...)
		}
		return append([]byte{tag, byte(len(v))}, v...)
	}
	filter := tlv(0xa3, tlv(0x04, []byte("uid")), tlv(0x04, []byte("bob")))
	body := tlv(0x63, tlv(0x04, []byte("ou=people,"+testbed.Suffix)), tlv(0x0a, []byte{2}), tlv(0x0a, []byte{0}),
		tlv(0x02, []byte{0}), tlv(0x02, []byte{0}), tlv(0x01, []byte{0}), filter, tlv(0x30, tlv(0x04, []byte("cn"))))
	return tlv(0x30, tlv(0x02, []byte{id}), body)
}
