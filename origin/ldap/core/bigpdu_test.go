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

// bigDN is the entry of bigValueLDIF.
var bigDN = "uid=big,ou=bulk," + testbed.Suffix

// bigValueLDIF is the test directory plus bigDN, whose description is
// size bytes: its SearchResultEntry is one PDU of that size.
func bigValueLDIF(size int) string {
	return testbed.DirectoryLDIF(0) + fmt.Sprintf("dn: %s\nobjectClass: inetOrgPerson\nuid: big\ncn: big\nsn: big\ndescription: %s\n\n",
		bigDN, strings.Repeat("x", size))
}

// A server PDU far over MaxQueued (a 10 MiB value) is read whole by a
// client that reads, over plain LDAP and LDAPS, ten times of ten: the
// PDU the client is reading does not count against the cap, so the
// SearchResultDone queued behind it is not refused (counting it cuts
// the client at most reads, and over LDAPS at every one).
func TestBigPDUReadWhole(t *testing.T) {
	testbed.Need(t, "ldapsearch")
	const size = 10 << 20
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{LDIF: bigValueLDIF(size)})
	p := newPKI(t)
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
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"})), tc.mod)
			want := []byte("description: " + strings.Repeat("x", size) + "\n")
			for i := range 10 {
				cmd := exec.Command("ldapsearch", "-x", "-H", tc.scheme+"://"+h.addr, "-b", bigDN, "-s", "base",
					"-LLL", "-o", "ldif-wrap=no", "description")
				cmd.Env = append(os.Environ(), "LDAPTLS_CACERT="+p.path("ca.pem"), "LDAPTLS_REQCERT=demand")
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				if err != nil || !bytes.Contains(out, want) {
					t.Fatalf("read %d of 10: %v, %d bytes out\n%s", i+1, err, len(out), stderr.String())
				}
			}
			if cut := h.logs.JSONLines("client stopped reading: disconnected"); len(cut) != 0 {
				t.Fatalf("a reading client was cut: %v", cut)
			}
		})
	}
}

// A client that stops reading in the middle of a big PDU is still cut
// once the answers queued behind it pass MaxQueued: here its second
// 10 MiB entry is queued, the answer after it is refused.
func TestBigPDUStalledReaderCut(t *testing.T) {
	const size = 10 << 20
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{LDIF: bigValueLDIF(size)})
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
	if want := fmt.Sprintf("more than %d bytes queued", core.MaxQueued); !strings.Contains(fmt.Sprint(cut["err"]), want) {
		t.Errorf("cut for %v, want %q", cut["err"], want)
	}
}
