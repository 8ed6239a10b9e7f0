package core_test

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
)

// bigDN is the entry of bigLDIF whose description is one big value.
var bigDN = "uid=big,ou=bulk," + testbed.Suffix

// rowsBase holds the rows entries of bigLDIF, and nothing else.
var rowsBase = "ou=rows," + testbed.Suffix

// bigLDIF is the test directory plus bigDN, whose description is size
// bytes (its SearchResultEntry is one PDU of that size), and under
// rowsBase rows entries uid=row<i> whose descriptions are rowSize bytes.
func bigLDIF(size, rows, rowSize int) string {
	var b strings.Builder
	b.WriteString(testbed.DirectoryLDIF(0))
	fmt.Fprintf(&b, "dn: %s\nobjectClass: inetOrgPerson\nuid: big\ncn: big\nsn: big\ndescription: %s\n\n", bigDN, strings.Repeat("x", size))
	fmt.Fprintf(&b, "dn: %s\nobjectClass: organizationalUnit\nou: rows\n\n", rowsBase)
	for i := range rows {
		fmt.Fprintf(&b, "dn: uid=row%d,%s\nobjectClass: inetOrgPerson\nuid: row%d\ncn: row\nsn: row\ndescription: %s\n\n",
			i, rowsBase, i, strings.Repeat(string(rune('a'+i)), rowSize))
	}
	return b.String()
}

// Server PDUs far over MaxQueued are read whole by a client that reads,
// over plain LDAP and LDAPS, ten times of ten: one 10 MiB value, and a
// search of five entries of 6 MiB each that slapd sends faster than
// ldapsearch reads them. The PDU the client is reading does not count
// against MaxQueued, and a client that keeps taking its answers is not
// cut for being behind (below MaxHeld): it falls behind by most of the
// 30 MiB and catches up.
func TestBigPDUReadWhole(t *testing.T) {
	testbed.Need(t, "ldapsearch")
	const size, rows, rowSize = 10 << 20, 5, 6 << 20
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{LDIF: bigLDIF(size, rows, rowSize)})
	p := newPKI(t)
	var wantRows [][]byte
	for i := range rows {
		wantRows = append(wantRows, []byte("description: "+strings.Repeat(string(rune('a'+i)), rowSize)+"\n"))
	}
	for _, tc := range []struct {
		name, scheme string
		mod          func(*core.Config)
	}{
		{"plain", "ldap", nil},
		{"ldaps", "ldaps", func(c *core.Config) {
			c.TLSMode = core.TLSOn
			c.TLS = &tls.Config{Certificates: []tls.Certificate{p.server}}
		}},
	} {
		for _, search := range []struct {
			name string
			args []string
			want [][]byte
		}{
			{"one 10 MiB value", []string{"-b", bigDN, "-s", "base"}, [][]byte{[]byte("description: " + strings.Repeat("x", size) + "\n")}},
			{"five 6 MiB entries", []string{"-b", rowsBase, "-s", "one", "(uid=row*)"}, wantRows},
		} {
			t.Run(tc.name+"/"+search.name, func(t *testing.T) {
				h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"})), tc.mod)
				for i := range 10 {
					args := append([]string{"-x", "-H", tc.scheme + "://" + h.addr, "-LLL", "-o", "ldif-wrap=no"}, search.args...)
					cmd := exec.Command("ldapsearch", append(args, "description")...)
					cmd.Env = append(os.Environ(), "LDAPTLS_CACERT="+p.path("ca.pem"), "LDAPTLS_REQCERT=demand")
					var stderr bytes.Buffer
					cmd.Stderr = &stderr
					out, err := cmd.Output()
					if err != nil {
						t.Fatalf("read %d of 10: %v, %d bytes out\n%s", i+1, err, len(out), stderr.String())
					}
					for j, want := range search.want {
						if !bytes.Contains(out, want) {
							t.Fatalf("read %d of 10: value %d of %d missing, %d bytes out\n%s", i+1, j+1, len(search.want), len(out), stderr.String())
						}
					}
				}
				if cut := h.logs.JSONLines("client stopped reading: disconnected"); len(cut) != 0 {
					t.Fatalf("a reading client was cut: %v", cut)
				}
			})
		}
	}
}

// A client that stops reading in the middle of a big PDU is still cut
// when it takes nothing for a StallWindow with more than MaxQueued
// queued behind that PDU (here its second and third 10 MiB entries),
// long before WriteTimeout (30 s) would cut it.
func TestBigPDUStalledReaderCut(t *testing.T) {
	const size = 10 << 20
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{LDIF: bigLDIF(size, 0, 0)})
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"})), nil)
	c, err := (&net.Dialer{Control: smallBuffers}).Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for id := int32(1); id <= 3; id++ {
		if _, err := c.Write(searchAttrsPDU(id, bigDN, "description")); err != nil {
			t.Fatal(err)
		}
	}
	waitWithin(t, 60*time.Second, "the client to be cut", func() bool {
		return len(h.logs.JSONLines("client stopped reading: disconnected")) == 1
	})
	cut := h.logs.JSONLines("client stopped reading: disconnected")[0]
	if want := fmt.Sprintf("more than %d bytes queued for the client and none of it taken for %v", core.MaxQueued, core.StallWindow); !strings.Contains(fmt.Sprint(cut["err"]), want) {
		t.Errorf("cut for %v, want %q", cut["err"], want)
	}
}

// A client that reads, slowly, while slapd sends far more than MaxHeld
// (six pipelined searches of five 6 MiB entries, 180 MiB) is not cut for
// stalling — it takes a piece every few tens of milliseconds, well within
// StallWindow — but the session stops holding answers for it at MaxHeld
// (132 MiB) and cuts it there: the bound on what one client costs the
// core's memory holds whatever the client does.
func TestBigEntriesSlowReaderCutAtMaxHeld(t *testing.T) {
	const rows, rowSize, searches = 5, 6 << 20, 6
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{LDIF: bigLDIF(0, rows, rowSize)})
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"})), nil)
	if total := int64(searches * rows * rowSize); total <= core.DefaultConfig().MaxHeld() {
		t.Fatalf("the searches return %d bytes, not more than MaxHeld %d", total, core.DefaultConfig().MaxHeld())
	}
	c, err := (&net.Dialer{Control: smallBuffers}).Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for id := int32(1); id <= searches; id++ {
		if _, err := c.Write(searchAttrsPDU(id, rowsBase, "description")); err != nil {
			t.Fatal(err)
		}
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Minute)) // a hang guard
	var got int64
	buf := make([]byte, 16<<10)
	cutLine := func() bool { return len(h.logs.JSONLines("client too far behind: disconnected")) > 0 }
	for i := 0; i%20 != 0 || !cutLine(); i++ {
		// A slow reader, at most 8 KiB (its receive buffer) per 10 ms:
		// far slower than slapd fills the queue, yet 64 KiB per
		// StallWindow even when a loaded host stretches the pause tenfold.
		time.Sleep(10 * time.Millisecond)
		n, err := c.Read(buf)
		if got += int64(n); err != nil && !cutLine() {
			t.Fatalf("after %d bytes, before the session's line: %v", got, err)
		}
		if err != nil {
			break
		}
	}
	t.Logf("cut after the client read %d bytes", got)
	cut := h.logs.JSONLines("client too far behind: disconnected")[0]
	if want := fmt.Sprintf("more than %d bytes held for the client", core.DefaultConfig().MaxHeld()); !strings.Contains(fmt.Sprint(cut["err"]), want) {
		t.Errorf("cut for %v, want %q", cut["err"], want)
	}
	if stalled := h.logs.JSONLines("client stopped reading: disconnected"); len(stalled) != 0 {
		t.Errorf("a client that read was cut for not reading: %v", stalled)
	}
}
