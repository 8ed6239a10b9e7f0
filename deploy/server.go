package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgefleet/edgefleet/internal/clock"
	"github.com/edgefleet/edgefleet/internal/loglimit"
	"github.com/edgefleet/edgefleet/internal/safefile"
)

// ServerConfig is the embedded authoritative server (`fleet dns serve`).
type ServerConfig struct {
	Zone     string // the zone served
	ZoneFile string // where the zone is kept across restarts
	// NS is the zone's name server ("ns1.<zone>" when empty); NSAddr, when
	// set, is its address record in a new zone.
	NS, NSAddr string
	// KeyName, Algorithm and Secret (base64): the TSIG key updates must be
	// signed with.
	KeyName, Algorithm, Secret string
	// Names the key may update (the inventory's name), their A and AAAA
	// records only; any other name or type is REFUSED.
	Names []string
	Log   *slog.Logger
	// Registerer, when set, gets edgefleet_fleet_dns_updates_total.
	Registerer prometheus.Registerer
	// Now, if non-nil, is used instead of time.Now (internal/clock): the
	// clock of the replay cache and the TSIG time check.
	Now func() time.Time
}

// Results of an UPDATE: the `result` label of
// edgefleet_fleet_dns_updates_total and of the refusal's log line.
const (
	UpdateApplied  = "success"  // applied, or a no-op
	UpdateUnsigned = "unsigned" // no TSIG: REFUSED
	UpdateBadKey   = "badkey"   // a key the server does not know: NOTAUTH/BADKEY
	UpdateBadSig   = "badsig"   // the MAC does not verify: NOTAUTH/BADSIG
	UpdateBadTime  = "badtime"  // signed outside the fudge window: NOTAUTH/BADTIME
	UpdateReplay   = "replay"   // a copy of an update already received: REFUSED
	UpdateRefused  = "refused"  // signed, but not allowed or not applicable
)

var updateResults = []string{UpdateApplied, UpdateUnsigned, UpdateBadKey, UpdateBadSig, UpdateBadTime, UpdateReplay, UpdateRefused}

// maxFudge bounds the time window of a signed UPDATE whatever fudge its
// signer chose: it must be signed within 5 minutes of the server's clock
// (RFC 8945's recommended fudge). The replay cache remembers an update
// that long.
const maxFudge = 300 * time.Second

// Server answers queries for its zone authoritatively and applies RFC 2136
// UPDATEs signed with its key, writing the zone file before it answers.
type Server struct {
	cfg  ServerConfig
	log  *slog.Logger
	mu   sync.Mutex
	zone *Zone

	udp, tcp *dns.Server
	// Addr is the address it serves on, once Serve is called.
	Addr string

	now func() time.Time
	// refusals limits the lines of refused UPDATEs (an unsigned one is a
	// spoofable UDP packet); the metric counts every one.
	refusals *loglimit.Limiter
	results  map[string]prometheus.Counter
	// seen holds the MAC of every verified UPDATE until it stops
	// verifying (time signed + fudge): a copy is a replay (under mu).
	seen map[string]time.Time
}

var _ dns.Handler = (*Server)(nil)

// Validate reports what the server cannot run with.
func (c ServerConfig) Validate() error {
	var errs []error
	if !isDomain(c.Zone) {
		errs = append(errs, fmt.Errorf("zone: %q is not a domain name", c.Zone))
	}
	if c.ZoneFile == "" {
		errs = append(errs, errors.New("zone file: required"))
	}
	if c.KeyName == "" || c.Secret == "" {
		errs = append(errs, errors.New("dns.tsig: a key name and secret are required to accept updates"))
	}
	for _, n := range c.Names {
		if !isDomain(n) || !inZone(n, c.Zone) {
			errs = append(errs, fmt.Errorf("name: %q is not inside zone %q", n, c.Zone))
		}
	}
	if c.NSAddr != "" && net.ParseIP(c.NSAddr) == nil {
		errs = append(errs, fmt.Errorf("ns address: %q is not an IP address", c.NSAddr))
	}
	return errors.Join(errs...)
}

// NewServer loads the zone file, or creates the zone (SOA and NS) and
// writes it when the file does not exist. A zone file that does not parse
// is an error naming it.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Names = slices.Clone(cfg.Names)
	s := &Server{cfg: cfg, log: cfg.Log, now: clock.Func(cfg.Now), seen: map[string]time.Time{}, results: map[string]prometheus.Counter{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.refusals = loglimit.Refusals(s.now)
	total := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgefleet_fleet_dns_updates_total",
		Help: "UPDATEs the embedded DNS server received, by result (success, or why it was refused).",
	}, []string{"result"})
	for _, r := range updateResults {
		s.results[r] = total.WithLabelValues(r)
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(total); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	s.cfg.Zone = dns.CanonicalName(cfg.Zone)
	s.cfg.KeyName = dns.CanonicalName(cfg.KeyName)
	s.cfg.Algorithm = dns.CanonicalName(cfg.Algorithm)
	for i, n := range cfg.Names {
		s.cfg.Names[i] = dns.CanonicalName(n)
	}
	if s.cfg.NS == "" {
		s.cfg.NS = "ns1." + s.cfg.Zone
	}
	b, err := safefile.Read(cfg.ZoneFile, safefile.MaxConfig, nil)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if s.zone, err = NewZone(s.cfg.Zone, s.cfg.NS, cfg.NSAddr); err != nil {
			return nil, err
		}
		if err := WriteFileAtomic(cfg.ZoneFile, s.zone.Marshal(), 0o644); err != nil {
			return nil, fmt.Errorf("zone file: %w", err)
		}
	case err != nil:
		return nil, fmt.Errorf("zone file: %w", err)
	default:
		if s.zone, err = ParseZone(b, s.cfg.Zone); err != nil {
			return nil, fmt.Errorf("zone file %s: %w", cfg.ZoneFile, err)
		}
	}
	return s, nil
}

// Listen opens the UDP and TCP sockets of addr (the TCP one on the port
// the UDP one got, for a port 0).
func Listen(addr string) (net.PacketConn, net.Listener, error) {
	_, port, _ := net.SplitHostPort(addr)
	for try := 0; ; try++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("dns serve: %w", err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		// A port the kernel chose for UDP may be taken for TCP: choose again.
		if port != "0" || try == 20 {
			return nil, nil, fmt.Errorf("dns serve: %w", err)
		}
	}
}

// Serve answers on pc (UDP) and ln (TCP) until Close; it returns at once.
func (s *Server) Serve(pc net.PacketConn, ln net.Listener) {
	s.Addr = pc.LocalAddr().String()
	secret := map[string]string{s.cfg.KeyName: s.cfg.Secret}
	s.udp = &dns.Server{PacketConn: pc, Handler: s, TsigSecret: secret, MsgAcceptFunc: acceptMsg}
	s.tcp = &dns.Server{Listener: limitListener(ln, maxTCPConns), Handler: s, TsigSecret: secret, MsgAcceptFunc: acceptMsg}
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		go srv.ActivateAndServe()
	}
	s.log.Info("dns server started", "addr", s.Addr, "zone", s.cfg.Zone, "serial", s.serial())
}

// maxTCPConns bounds the TCP connections the server holds at once
// (miekg/dns runs a goroutine per connection; each is also bounded in
// time by its read and idle timeouts). Beyond it, new connections wait in
// the listen backlog until one ends. Tests lower it.
var maxTCPConns = 256

// limitListener accepts at most n connections at a time from ln: Accept
// waits while n are open (as golang.org/x/net/netutil.LimitListener).
func limitListener(ln net.Listener, n int) net.Listener {
	return &limited{Listener: ln, sem: make(chan struct{}, n)}
}

type limited struct {
	net.Listener
	sem chan struct{}
}

func (l *limited) Accept() (net.Conn, error) {
	l.sem <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitedConn{Conn: c, release: func() { <-l.sem }}, nil
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// acceptMsg is miekg/dns's default filter with UPDATE let in: one zone
// (question), bounded prerequisite and update sections, the TSIG (and an
// OPT) in the additional section.
func acceptMsg(dh dns.Header) dns.MsgAcceptAction {
	const qr = 1 << 15
	if dh.Bits&qr != 0 {
		return dns.MsgIgnore
	}
	switch opcode := int(dh.Bits>>11) & 0xF; {
	case opcode == dns.OpcodeQuery && dh.Ancount <= 1 && dh.Nscount <= 1,
		opcode == dns.OpcodeUpdate && dh.Ancount <= 64 && dh.Nscount <= 256:
	case opcode != dns.OpcodeQuery && opcode != dns.OpcodeUpdate:
		return dns.MsgRejectNotImplemented
	default:
		return dns.MsgReject
	}
	if dh.Qdcount != 1 || dh.Arcount > 2 {
		return dns.MsgReject
	}
	return dns.MsgAccept
}

// Close stops both listeners.
func (s *Server) Close() error {
	return errors.Join(s.udp.Shutdown(), s.tcp.Shutdown())
}

func (s *Server) serial() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.zone.SOA().Serial
}

// ServeDNS answers one message.
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	opt := r.IsEdns0()
	switch {
	case opt != nil && opt.Version() != 0:
		m.SetRcode(r, dns.RcodeBadVers) // RFC 6891 6.1.3: only EDNS version 0
	case r.Opcode == dns.OpcodeQuery:
		m = s.query(r)
		if r.IsTsig() != nil {
			// A signed query (nsupdate looking up the zone, dig -y) gets
			// a signed answer, or the TSIG error in place of the answer.
			if res, rcode, _ := s.checkTSIG(w, r, m); res != "" {
				t := m.IsTsig()
				m = new(dns.Msg).SetRcode(r, rcode)
				m.Extra = []dns.RR{t}
			}
		}
	case r.Opcode == dns.OpcodeUpdate:
		m = s.update(w, r)
	default:
		m.SetRcode(r, dns.RcodeNotImplemented)
	}
	fit(m, opt, w.LocalAddr().Network() == "udp")
	if t := m.IsTsig(); t != nil && (t.Error == dns.RcodeBadKey || t.Error == dns.RcodeBadSig) {
		// Unsigned (RFC 8945 5.3.2), but with the server's time, which
		// miekg/dns would write as 0 (nsupdate: "clocks are
		// unsynchronized").
		t.TimeSigned = uint64(s.now().Unix())
		if b, err := m.Pack(); err == nil {
			w.Write(b)
		}
		return
	}
	w.WriteMsg(m)
}

// maxUDPSize is the largest UDP answer (the DNS flag day 2020 size, no IP
// fragmentation), advertised in the OPT record of every EDNS answer.
const maxUDPSize = 1232

// fit makes m an answer a client can read: an EDNS query gets an OPT
// record back (before the TSIG, which stays last); over UDP m is cut to
// 512 bytes, or to the client's EDNS size up to maxUDPSize, with the TC bit
// set when records had to go, so the client asks again over TCP.
func fit(m *dns.Msg, opt *dns.OPT, udp bool) {
	m.Compress = true // 33 bytes an A record uncompressed, 16 compressed
	// The TSIG stays last, and is set aside meanwhile: miekg/dns does not
	// truncate a message that has one.
	sig := m.IsTsig()
	if sig != nil {
		m.Extra = m.Extra[:len(m.Extra)-1]
	}
	size := dns.MinMsgSize
	if opt != nil {
		size = int(min(max(opt.UDPSize(), dns.MinMsgSize), maxUDPSize))
		o := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
		o.SetUDPSize(maxUDPSize) // Pack puts an extended rcode (BADVERS) in it
		m.Extra = append(m.Extra, o)
	}
	if udp {
		m.Truncate(size)
		if sig != nil {
			// Room for the TSIG and its MAC (64 bytes at most, SHA-512),
			// which are written after this.
			for m.Len()+dns.Len(sig)+64 > size && len(m.Answer)+len(m.Ns) > 0 {
				if len(m.Ns) > 0 {
					m.Ns = m.Ns[:len(m.Ns)-1]
				} else {
					m.Answer = m.Answer[:len(m.Answer)-1]
				}
				m.Truncated = true
			}
		}
	}
	if sig != nil {
		m.Extra = append(m.Extra, sig)
	}
}

func (s *Server) query(r *dns.Msg) *dns.Msg {
	m := new(dns.Msg).SetReply(r)
	if len(r.Question) != 1 {
		return m.SetRcode(r, dns.RcodeFormatError)
	}
	q := r.Question[0]
	name := dns.CanonicalName(q.Name)
	if !dns.IsSubDomain(s.cfg.Zone, name) || q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY {
		return m.SetRcode(r, dns.RcodeRefused)
	}
	m.Authoritative = true
	s.mu.Lock()
	defer s.mu.Unlock()
	z := s.zone
	switch {
	case q.Qtype == dns.TypeANY:
		// RFC 8482: a minimal answer, one synthesized HINFO, so ANY is no
		// amplifier (the query's source is spoofable over UDP).
		if z.exists(name) {
			m.Answer = []dns.RR{&dns.HINFO{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeHINFO, Class: dns.ClassINET, Ttl: z.SOA().Minttl}, Cpu: "RFC8482"}}
		}
	default:
		m.Answer = copyRRs(z.get(name, q.Qtype))
	}
	if len(m.Answer) == 0 {
		if !z.exists(name) {
			m.Rcode = dns.RcodeNameError
		}
		m.Ns = []dns.RR{dns.Copy(z.SOA())}
	} else if name != z.Origin || q.Qtype != dns.TypeNS {
		m.Ns = copyRRs(z.get(z.Origin, dns.TypeNS))
	}
	return m
}

func copyRRs(set []dns.RR) []dns.RR {
	out := make([]dns.RR, len(set))
	for i, rr := range set {
		out[i] = dns.Copy(rr)
	}
	return out
}

// update applies an RFC 2136 UPDATE: signed with the key, prerequisites
// met, every change allowed, or nothing changes. The zone file is written
// before the answer. Its steps: verify the signature, authorise the
// update (not a replay, this zone, its prerequisites), apply it to a copy
// of the zone, persist the copy, and only then serve it.
func (s *Server) update(w dns.ResponseWriter, r *dns.Msg) *dns.Msg {
	m := new(dns.Msg).SetReply(r)
	if no := s.verifyUpdate(w, r, m); no != nil {
		return s.refuseUpdate(w, m, no)
	}
	// From here the answer is signed with the key.
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if no := s.authoriseUpdate(r, now); no != nil {
		return s.refuseUpdate(w, m, no)
	}
	z, no := s.applyUpdate(r.Ns)
	if no != nil {
		return s.refuseUpdate(w, m, no)
	}
	if z == nil {
		s.results[UpdateApplied].Inc()
		return m // nothing changed (a no-op delete): no new serial
	}
	if no := s.persistZone(z); no != nil {
		return s.refuseUpdate(w, m, no)
	}
	s.zone = z
	s.results[UpdateApplied].Inc()
	s.log.Info("dns update applied", "op", "update", "result", "success", "serial", z.SOA().Serial, "client", w.RemoteAddr().String())
	return m
}

// refusal is why an update is refused: the result label it is counted
// under, the rcode of the answer and the reason logged.
type refusal struct {
	result string
	rcode  int
	why    string
}

// refused is a refusal counted as UpdateRefused.
func refused(rcode int, why string) *refusal {
	return &refusal{result: UpdateRefused, rcode: rcode, why: why}
}

// refuseUpdate counts and logs (within the refusal limit) a refused
// update and gives m, its answer, the rcode.
func (s *Server) refuseUpdate(w dns.ResponseWriter, m *dns.Msg, no *refusal) *dns.Msg {
	s.results[no.result].Inc()
	if ok, suppressed := s.refusals.Allow(); ok {
		s.log.Warn("dns update refused", "result", no.result, "rcode", dns.RcodeToString[no.rcode], "err", no.why,
			"client", w.RemoteAddr().String(), "suppressed", suppressed)
	}
	m.Rcode = no.rcode
	return m
}

// verifyUpdate checks that r is signed with the key; checkTSIG gives m
// the TSIG record its answer carries.
func (s *Server) verifyUpdate(w dns.ResponseWriter, r, m *dns.Msg) *refusal {
	if r.IsTsig() == nil {
		return &refusal{result: UpdateUnsigned, rcode: dns.RcodeRefused, why: "not signed"}
	}
	if res, rcode, why := s.checkTSIG(w, r, m); res != "" {
		return &refusal{result: res, rcode: rcode, why: why}
	}
	return nil
}

// authoriseUpdate, under s.mu, refuses a verified update received
// before, one for another zone and one whose prerequisites do not hold.
func (s *Server) authoriseUpdate(r *dns.Msg, now time.Time) *refusal {
	t := r.IsTsig()
	signed := time.Unix(int64(t.TimeSigned), 0)
	// A copy of an update already received (a third party replaying a
	// captured one within its time window) is not applied again, even
	// if that one was refused: its conditions may hold now.
	for mac, until := range s.seen {
		if now.After(until) {
			delete(s.seen, mac)
		}
	}
	mac := strings.ToLower(t.MAC)
	if _, dup := s.seen[mac]; dup {
		return &refusal{result: UpdateReplay, rcode: dns.RcodeRefused, why: "replayed: an update with this MAC was received before (within its fudge window)"}
	}
	s.seen[mac] = signed.Add(min(time.Duration(t.Fudge)*time.Second, maxFudge))
	if len(r.Question) != 1 || r.Question[0].Qtype != dns.TypeSOA {
		return refused(dns.RcodeFormatError, "zone section is not one SOA question")
	}
	if dns.CanonicalName(r.Question[0].Name) != s.cfg.Zone {
		return refused(dns.RcodeNotAuth, "not authoritative for "+r.Question[0].Name)
	}
	if rcode, why := s.prereqs(r.Answer); rcode != dns.RcodeSuccess {
		return refused(rcode, why)
	}
	return nil
}

// applyUpdate applies the update section to a copy of the zone, under
// s.mu. The copy is nil when nothing changed.
func (s *Server) applyUpdate(rrs []dns.RR) (*Zone, *refusal) {
	z := s.zone.clone()
	for _, rr := range rrs {
		if rcode, why := s.apply(z, rr); rcode != dns.RcodeSuccess {
			return nil, refused(rcode, why)
		}
	}
	if bytes.Equal(z.Marshal(), s.zone.Marshal()) {
		return nil, nil
	}
	if n := z.count(); n > maxZoneRecords {
		return nil, refused(dns.RcodeRefused, fmt.Sprintf("the zone would hold %d records, more than %d", n, maxZoneRecords))
	}
	return z, nil
}

// persistZone gives z its new serial and writes the zone file. It never
// writes a file the next start would refuse: z must read back.
func (s *Server) persistZone(z *Zone) *refusal {
	z.SOA().Serial++
	text := z.Marshal()
	if _, err := ParseZone(text, s.cfg.Zone); err != nil {
		return refused(dns.RcodeRefused, "the zone would not read back: "+err.Error())
	}
	if err := WriteFileAtomic(s.cfg.ZoneFile, text, 0o644); err != nil {
		return refused(dns.RcodeServerFailure, err.Error())
	}
	return nil
}

// checkTSIG checks the TSIG of r, a signed message, and gives m, its
// answer, the TSIG record RFC 8945 5.2 wants: on success one the key
// signs when m is written (a signed request gets a signed answer:
// nsupdate, dig -y verify it), else the error (BADKEY, BADSIG: unsigned;
// BADTIME: signed, with the server's time). It returns the failure's
// result label, the rcode and why, or "" when r verifies.
func (s *Server) checkTSIG(w dns.ResponseWriter, r, m *dns.Msg) (result string, rcode int, why string) {
	t := r.IsTsig()
	if dns.CanonicalName(t.Hdr.Name) != s.cfg.KeyName || dns.CanonicalName(t.Algorithm) != s.cfg.Algorithm {
		// The reply carries the TSIG error unsigned (RFC 8945 5.2.1); an
		// empty algorithm (rdlength 0) is written as the root, not as
		// nothing (which made a malformed answer: FuzzServeDNS).
		m.SetTsig(t.Hdr.Name, dns.Fqdn(t.Algorithm), 300, int64(t.TimeSigned))
		m.IsTsig().Error = dns.RcodeBadKey
		return UpdateBadKey, dns.RcodeNotAuth, "unknown key " + t.Hdr.Name
	}
	now := s.now()
	signed := time.Unix(int64(t.TimeSigned), 0)
	err := w.TsigStatus()
	if err == nil && (now.Sub(signed) > maxFudge || signed.Sub(now) > maxFudge) {
		err = fmt.Errorf("%w: signed %v from the server's clock, more than %v", dns.ErrTime, now.Sub(signed).Round(time.Second), maxFudge)
	}
	if err != nil {
		m.SetTsig(t.Hdr.Name, dns.Fqdn(t.Algorithm), 300, int64(t.TimeSigned))
		if errors.Is(err, dns.ErrTime) {
			// Signed with the request's time, the server's in Other Data
			// (RFC 8945 5.2.3), so the client can tell the skew.
			e := m.IsTsig()
			e.Error, e.OtherLen, e.OtherData = dns.RcodeBadTime, 6, fmt.Sprintf("%012x", now.Unix())
			return UpdateBadTime, dns.RcodeNotAuth, "tsig: " + err.Error()
		}
		m.IsTsig().Error = dns.RcodeBadSig
		return UpdateBadSig, dns.RcodeNotAuth, "tsig: " + err.Error()
	}
	m.SetTsig(s.cfg.KeyName, s.cfg.Algorithm, 300, int64(t.TimeSigned))
	return "", dns.RcodeSuccess, ""
}

// prereqs checks the prerequisite section (RFC 2136 3.2).
func (s *Server) prereqs(rrs []dns.RR) (int, string) {
	z := s.zone
	want := map[[2]string][]dns.RR{} // value-dependent "RRset exists", by name and type
	for _, rr := range rrs {
		h := rr.Header()
		name := dns.CanonicalName(h.Name)
		if !dns.IsSubDomain(s.cfg.Zone, name) {
			return dns.RcodeNotZone, name + " is outside the zone"
		}
		switch h.Class {
		case dns.ClassANY:
			if h.Rrtype == dns.TypeANY && !z.exists(name) || h.Rrtype != dns.TypeANY && len(z.get(name, h.Rrtype)) == 0 {
				if h.Rrtype == dns.TypeANY {
					return dns.RcodeNameError, name + " does not exist"
				}
				return dns.RcodeNXRrset, name + " has no " + dns.TypeToString[h.Rrtype]
			}
		case dns.ClassNONE:
			if h.Rrtype == dns.TypeANY && z.exists(name) {
				return dns.RcodeYXDomain, name + " exists"
			}
			if h.Rrtype != dns.TypeANY && len(z.get(name, h.Rrtype)) > 0 {
				return dns.RcodeYXRrset, name + " has " + dns.TypeToString[h.Rrtype]
			}
		case dns.ClassINET:
			k := [2]string{name, dns.TypeToString[h.Rrtype]}
			c := dns.Copy(rr)
			c.Header().Name = name
			want[k] = append(want[k], c)
		default:
			return dns.RcodeFormatError, "prerequisite class " + dns.ClassToString[h.Class]
		}
	}
	for k, set := range want {
		have := z.get(k[0], dns.StringToType[k[1]])
		if len(have) != len(set) {
			return dns.RcodeNXRrset, k[0] + " " + k[1] + " differs"
		}
		for _, rr := range set {
			if !slices.ContainsFunc(have, func(o dns.RR) bool { return dns.IsDuplicate(o, rr) }) {
				return dns.RcodeNXRrset, k[0] + " " + k[1] + " differs"
			}
		}
	}
	return dns.RcodeSuccess, ""
}

// apply performs one update RR on z (RFC 2136 3.4.2), if the key may.
func (s *Server) apply(z *Zone, rr dns.RR) (int, string) {
	h := rr.Header()
	name := dns.CanonicalName(h.Name)
	if !dns.IsSubDomain(s.cfg.Zone, name) {
		return dns.RcodeNotZone, name + " is outside the zone"
	}
	if !slices.Contains(s.cfg.Names, name) {
		return dns.RcodeRefused, "the key may not update " + name
	}
	// Only the A and AAAA RRsets of the names: no CNAME beside them, no
	// "delete every RRset" that would take the operator's TXT too.
	if h.Rrtype != dns.TypeA && h.Rrtype != dns.TypeAAAA {
		return dns.RcodeRefused, "only A and AAAA records are updatable, not " + dns.Type(h.Rrtype).String()
	}
	switch h.Class {
	case dns.ClassINET:
		if h.Rdlength == 0 {
			return dns.RcodeFormatError, "add without data"
		}
		c := dns.Copy(rr)
		c.Header().Name = name
		z.add(c)
	case dns.ClassANY:
		if z.rrs[name] != nil {
			z.setRRset(name, h.Rrtype, nil)
		}
	case dns.ClassNONE:
		c := dns.Copy(rr)
		c.Header().Name = name
		c.Header().Class = dns.ClassINET
		if z.rrs[name] != nil {
			z.remove(c)
		}
	default:
		return dns.RcodeFormatError, "update class " + dns.ClassToString[h.Class]
	}
	return dns.RcodeSuccess, ""
}
