package deploy

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/edgefleet/edgefleet/internal/loglimit"
	"github.com/edgefleet/edgefleet/internal/testbed"
)

const testSecret = "c2VjcmV0LW9mLXRoZS1lbWJlZGRlZC1zZXJ2ZXI="

// embedded serves example.test on loopback (UDP and TCP) from a zone file
// holding zone ("" for a new zone); the key fleet-key may update
// ldap.example.test; edit, when set, changes the rest of the config. It
// returns the server and its zone file.
func embedded(t *testing.T, zone string, edit func(*ServerConfig)) (*Server, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "fleet.zone")
	if zone != "" {
		if err := os.WriteFile(file, []byte(zone), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := serverConfig(file, nil)
	if edit != nil {
		edit(&cfg)
	}
	return serve(t, cfg), file
}

// serve starts a server of cfg on loopback (UDP and TCP), closed when the
// test ends.
func serve(t *testing.T, cfg ServerConfig) *Server {
	t.Helper()
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pc, ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve(pc, ln)
	t.Cleanup(func() { srv.Close() })
	return srv
}

func serverConfig(file string, log *slog.Logger) ServerConfig {
	return ServerConfig{Zone: "example.test", ZoneFile: file, KeyName: "fleet-key", Algorithm: "hmac-sha256",
		Secret: testSecret, Names: []string{"ldap.example.test"}, Log: log}
}

// newUpdate is an UPDATE of example.test. adding the records of add (zone
// file lines) and deleting those of del (nsupdate's "update delete" forms:
// a bare name deletes every RRset, a name and a type one RRset).
func newUpdate(t *testing.T, add []string, del []string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg).SetUpdate("example.test.")
	for _, s := range add {
		rr, err := dns.NewRR("$ORIGIN example.test.\n" + s)
		if err != nil {
			t.Fatal(err)
		}
		m.Insert([]dns.RR{rr})
	}
	for _, s := range del {
		f := strings.Fields(s)
		hdr := dns.RR_Header{Name: dns.Fqdn(f[0] + ".example.test"), Rrtype: dns.TypeANY}
		if len(f) > 1 {
			hdr.Rrtype = dns.StringToType[f[1]]
		}
		m.RemoveRRset([]dns.RR{&dns.ANY{Hdr: hdr}})
	}
	return m
}

// exchange signs m with the key (now) and sends it over network.
func exchange(t *testing.T, addr, network string, m *dns.Msg) *dns.Msg {
	t.Helper()
	m.SetTsig("fleet-key.", dns.HmacSHA256, 300, time.Now().Unix())
	c := &dns.Client{Net: network, TsigSecret: map[string]string{"fleet-key.": testSecret}, Timeout: 10 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("update over %s: %v", network, err)
	}
	return r
}

// TestServerRefusesWhatItCannotReload: over UDP and TCP, an update of
// anything but the A/AAAA RRsets of name is REFUSED (a CNAME beside the A
// records, a TXT, a CAA whose tag has a space — which the zone parser
// refuses at the next start — a delete of every RRset), and so is one that
// would take the zone past 2000 records; refused updates leave the zone
// file as it was, and the server starts again from the file it wrote.
func TestServerRefusesWhatItCannotReload(t *testing.T) {
	var zone strings.Builder
	zone.WriteString("$ORIGIN example.test.\n@ 60 IN SOA ns1 hostmaster 1 3600 600 86400 60\n@ 60 IN NS ns1\nldap 300 IN TXT \"not ours\"\n")
	for i := 1; i <= maxZoneRecords-5; i++ { // with SOA, NS, TXT: 1998 records
		fmt.Fprintf(&zone, "r%d 60 IN A 192.0.2.%d\n", i, i%250+1)
	}
	srv, file := embedded(t, zone.String(), nil)
	for _, network := range []string{"udp", "tcp"} {
		for _, tc := range []struct {
			name     string
			add, del []string
		}{
			{"cname beside the A records", []string{"ldap 60 IN CNAME elsewhere.example.net."}, nil},
			{"txt", []string{`ldap 60 IN TXT "ours now"`}, nil},
			{"caa with a space in the tag", []string{`ldap 60 IN CAA 0 issue "ca.example.net"`}, nil},
			{"delete every rrset", nil, []string{"ldap"}},
			{"delete the txt", nil, []string{"ldap TXT"}},
		} {
			m := newUpdate(t, tc.add, tc.del)
			if caa, ok := m.Ns[0].(*dns.CAA); ok {
				caa.Tag = "is sue"
			}
			before, _ := os.ReadFile(file)
			if r := exchange(t, srv.Addr, network, m); r.Rcode != dns.RcodeRefused {
				t.Errorf("%s over %s: %s, want REFUSED", tc.name, network, dns.RcodeToString[r.Rcode])
			}
			if after, _ := os.ReadFile(file); string(after) != string(before) {
				t.Errorf("%s over %s: the zone file changed", tc.name, network)
			}
		}
	}
	// 1998 + 2 = 2000 records: accepted; one more is not.
	if r := exchange(t, srv.Addr, "tcp", newUpdate(t, []string{"ldap 60 IN A 198.51.100.1", "ldap 60 IN AAAA 2001:db8::1"}, nil)); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("the 2000th record: %s", dns.RcodeToString[r.Rcode])
	}
	if r := exchange(t, srv.Addr, "udp", newUpdate(t, []string{"ldap 60 IN A 198.51.100.2"}, nil)); r.Rcode != dns.RcodeRefused {
		t.Fatalf("the 2001st record: %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
	srv.Close()
	again, err := NewServer(serverConfig(file, nil))
	if err != nil {
		t.Fatalf("the server does not start from the file it wrote: %v", err)
	}
	if got := again.zone.get("ldap.example.test.", dns.TypeA); len(got) != 1 {
		t.Fatalf("after the restart ldap has %v", got)
	}
	if got := again.zone.get("ldap.example.test.", dns.TypeTXT); len(got) != 1 {
		t.Fatalf("after the restart the operator's TXT is %v", got)
	}
}

// signed packs m signed with secret (the key fleet-key), as it goes on the
// wire: a packet a third party can capture and send again.
func signed(t *testing.T, m *dns.Msg, secret string, fudge uint16, at time.Time) []byte {
	t.Helper()
	m.SetTsig("fleet-key.", dns.HmacSHA256, fudge, at.Unix())
	b, _, err := dns.TsigGenerate(m, secret, "", false)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// raw sends the packet b over network and returns the answer, unverified.
func raw(t *testing.T, addr, network string, b []byte) *dns.Msg {
	t.Helper()
	c, err := net.DialTimeout(network, addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	co := &dns.Conn{Conn: c, UDPSize: dns.MaxMsgSize}
	if _, err := co.Write(b); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, dns.MaxMsgSize)
	n, err := co.Read(buf)
	if err != nil {
		t.Fatalf("answer over %s: %v", network, err)
	}
	r := new(dns.Msg)
	if err := r.Unpack(buf[:n]); err != nil {
		t.Fatalf("answer over %s: %v", network, err)
	}
	return r
}

// answers is what the server answers for ldap.example.test A.
func answers(t *testing.T, addr string) []string {
	t.Helper()
	r, err := dns.Exchange(new(dns.Msg).SetQuestion("ldap.example.test.", dns.TypeA), addr)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rr := range r.Answer {
		out = append(out, rr.(*dns.A).A.String())
	}
	return out
}

// TestServerReplay: a signed add captured on the wire and sent again after
// the record was removed is REFUSED (signed), over UDP and over TCP, and
// the record stays removed; an update signed with a fudge beyond 5
// minutes, 20 minutes ago, is NOTAUTH/BADTIME with the server's time in
// Other Data. Each is counted by result.
func TestServerReplay(t *testing.T) {
	srv, _ := embedded(t, "", nil)
	add := signed(t, newUpdate(t, []string{"ldap 60 IN A 198.51.100.7"}, nil), testSecret, 300, time.Now())
	if r := raw(t, srv.Addr, "tcp", add); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("add: %s", dns.RcodeToString[r.Rcode])
	}
	del := new(dns.Msg).SetUpdate("example.test.")
	del.Remove([]dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "ldap.example.test.", Rrtype: dns.TypeA, Class: dns.ClassINET}, A: net.ParseIP("198.51.100.7")}})
	if r := raw(t, srv.Addr, "udp", signed(t, del, testSecret, 300, time.Now())); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("remove: %s", dns.RcodeToString[r.Rcode])
	}
	for _, network := range []string{"udp", "tcp"} {
		r := raw(t, srv.Addr, network, add)
		if r.Rcode != dns.RcodeRefused || r.IsTsig() == nil || r.IsTsig().MACSize == 0 {
			t.Fatalf("replayed add over %s: %s (signed: %v), want a signed REFUSED", network, dns.RcodeToString[r.Rcode], r.IsTsig() != nil)
		}
		if got := answers(t, srv.Addr); len(got) != 0 {
			t.Fatalf("after the replay over %s the server answers %v", network, got)
		}
	}

	// The signer's fudge (65535 s) does not stretch the server's window.
	old := time.Now().Add(-20 * time.Minute)
	late := signed(t, newUpdate(t, []string{"ldap 60 IN A 198.51.100.8"}, nil), testSecret, 65535, old)
	r := raw(t, srv.Addr, "tcp", late)
	tsig := r.IsTsig()
	if r.Rcode != dns.RcodeNotAuth || tsig == nil || tsig.Error != dns.RcodeBadTime || tsig.OtherLen != 6 {
		t.Fatalf("an update signed 20 minutes ago: %v", r)
	}
	if server, _ := strconv.ParseInt(tsig.OtherData, 16, 64); time.Since(time.Unix(server, 0)).Abs() > time.Minute {
		t.Fatalf("BADTIME other data %q is not the server's time", tsig.OtherData)
	}
	if got := answers(t, srv.Addr); len(got) != 0 {
		t.Fatalf("the late update published %v", got)
	}
	for result, want := range map[string]float64{UpdateApplied: 2, UpdateReplay: 2, UpdateBadTime: 1} {
		if got := value(srv.results[result]); got != want {
			t.Errorf("updates %s: %v, want %v", result, got, want)
		}
	}
}

// TestServerRefusalLog: 200 unsigned and 200 badly signed UPDATEs over UDP
// (spoofable) log at most 10 lines per 10 s, the next one after the window
// saying how many were suppressed; the metric counts them all. A BADSIG
// answer carries the server's time (miekg/dns writes 0, and nsupdate
// says "clocks are unsynchronized").
func TestServerRefusalLog(t *testing.T) {
	var out testbed.Buffer
	clock := testbed.NewClock(time.Now())
	srv, _ := embedded(t, "", func(c *ServerConfig) {
		c.Log, c.Now = slog.New(slog.NewTextHandler(&out, nil)), clock.Now
	})
	unsigned, err := newUpdate(t, []string{"ldap 60 IN A 198.51.100.9"}, nil).Pack()
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		if r := raw(t, srv.Addr, "udp", unsigned); r.Rcode != dns.RcodeRefused {
			t.Fatalf("unsigned: %s", dns.RcodeToString[r.Rcode])
		}
		b := signed(t, newUpdate(t, []string{"ldap 60 IN A 198.51.100.9"}, nil), testbed.WrongKeySecret, 300, time.Now())
		r := raw(t, srv.Addr, "udp", b)
		if tsig := r.IsTsig(); r.Rcode != dns.RcodeNotAuth || tsig == nil || tsig.Error != dns.RcodeBadSig {
			t.Fatalf("bad signature: %v", r)
		} else if d := time.Since(time.Unix(int64(tsig.TimeSigned), 0)).Abs(); d > time.Minute {
			t.Fatalf("BADSIG answer signed at %d, not the server's time", tsig.TimeSigned)
		}
	}
	if n := strings.Count(out.String(), "dns update refused"); n != loglimit.RefusalBurst {
		t.Fatalf("%d refusal lines for 400 refused updates, want %d:\n%s", n, loglimit.RefusalBurst, out.String())
	}
	clock.Advance(loglimit.RefusalWindow)
	raw(t, srv.Addr, "udp", unsigned)
	if !strings.Contains(out.String(), "suppressed=390") {
		t.Fatalf("the line after the window does not count the suppressed ones:\n%s", out.String())
	}
	for result, want := range map[string]float64{UpdateUnsigned: 201, UpdateBadSig: 200} {
		if got := value(srv.results[result]); got != want {
			t.Errorf("updates %s: %v, want %v", result, got, want)
		}
	}
}

func value(c prometheus.Counter) float64 {
	var m dto.Metric
	c.Write(&m)
	return m.GetCounter().GetValue()
}

// TestPublisherReadsTruncated: a set too big for one EDNS answer (100
// IPv4 edges, ~1.7 KB) comes truncated over UDP (TC, at most 1232 bytes)
// and the publisher reads it whole over TCP.
func TestPublisherReadsTruncated(t *testing.T) {
	var zone strings.Builder
	zone.WriteString("$ORIGIN example.test.\n@ 60 IN SOA ns1 hostmaster 1 3600 600 86400 60\n@ 60 IN NS ns1\n")
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&zone, "ldap 60 IN A 198.51.100.%d\n", i)
	}
	srv, _ := embedded(t, zone.String(), nil)
	q := new(dns.Msg).SetQuestion("ldap.example.test.", dns.TypeA).SetEdns0(maxUDPSize, false)
	b, _ := q.Pack()
	r := raw(t, srv.Addr, "udp", b)
	r.Compress = true // as it came
	if !r.Truncated || r.Len() > maxUDPSize || len(r.Answer) == 0 {
		t.Fatalf("UDP answer: TC %v, %d bytes, %d records; want TC within %d", r.Truncated, r.Len(), len(r.Answer), maxUDPSize)
	}
	pub := &Publisher{Server: srv.Addr, Zone: "example.test.", Name: "ldap.example.test.", KeyName: "fleet-key.", Algorithm: dns.HmacSHA256, Secret: testSecret}
	got, err := pub.Read(context.Background())
	if err != nil || len(got.A) != 100 {
		t.Fatalf("read: %d addresses, %v", len(got.A), err)
	}
}

// TestTCPConnectionsBounded: the embedded server holds at most
// maxTCPConns TCP connections at once; idle connections beyond it wait in
// the backlog and cost it nothing, and dig over TCP is answered again as
// soon as one of them closes.
func TestTCPConnectionsBounded(t *testing.T) {
	testbed.Need(t, "dig")
	old := maxTCPConns
	maxTCPConns = 3
	defer func() { maxTCPConns = old }()
	srv, _ := embedded(t, "", nil)
	var idle []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	dig := func() (string, error) {
		host, port, _ := net.SplitHostPort(srv.Addr)
		bin, _ := testbed.Path("dig")
		out, err := exec.Command(bin, "@"+host, "-p", port, "+tcp", "+time=1", "+tries=1", "+short",
			"SOA", "example.test").CombinedOutput()
		return string(out), err
	}
	if out, err := dig(); err == nil && strings.Contains(out, "example.test") {
		t.Fatalf("answered over TCP with %d idle connections held (limit 3): %q", len(idle), out)
	}
	idle[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := dig()
		if err == nil && strings.Contains(out, "example.test") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no TCP answer after a held connection closed: %q, %v", out, err)
		}
	}
}
