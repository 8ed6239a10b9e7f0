package deploy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// RRSet is what the authoritative server answers for the fleet's name: its
// A and AAAA records (sorted) and the TTL of each set.
type RRSet struct {
	Name          string
	A, AAAA       []netip.Addr
	TTLA, TTLAAAA uint32
}

// TTL is the A set's TTL, or the AAAA set's when there is no A record.
func (s RRSet) TTL() uint32 {
	if len(s.A) > 0 {
		return s.TTLA
	}
	return s.TTLAAAA
}

// TTLOf is the TTL of one family's records.
func (s RRSet) TTLOf(t uint16) uint32 {
	if t == dns.TypeAAAA {
		return s.TTLAAAA
	}
	return s.TTLA
}

// Addrs is A then AAAA.
func (s RRSet) Addrs() []netip.Addr { return append(slices.Clone(s.A), s.AAAA...) }

// Has reports whether a is in the set.
func (s RRSet) Has(a netip.Addr) bool { return slices.Contains(s.A, a) || slices.Contains(s.AAAA, a) }

// ChangeOp is what one UPDATE does.
type ChangeOp string

// The three kinds of change, applied in this order: a TTL change rewrites
// one family's records with the new TTL, then additions, then removals,
// so that the set only ever shrinks once what replaces it is published.
const (
	OpTTL    ChangeOp = "ttl"
	OpAdd    ChangeOp = "add"
	OpRemove ChangeOp = "remove"
)

// Change is one RFC 2136 UPDATE of the name's RRsets.
type Change struct {
	Op   ChangeOp
	Addr netip.Addr   // add, remove
	Type uint16       // ttl: dns.TypeA or dns.TypeAAAA
	Set  []netip.Addr // ttl: the records rewritten
	TTL  uint32
	Edge string // the edge the address belongs (or belonged) to, for the reader
}

// DNSPlan is the list of UPDATEs that turns the live set into the
// inventory's.
type DNSPlan struct {
	Name          string // FQDN
	Before, After []netip.Addr
	Changes       []Change

	beforeTTL uint32 // the highest TTL of the live records
}

// PlanDNS computes the UPDATEs that make live hold exactly the addresses
// of edges with the given TTL. gone names addresses that are no longer in
// the inventory (from the state file), for the plan's reader. A plan that
// would leave the name without any address is refused.
func PlanDNS(name string, live RRSet, edges []Edge, ttl uint32, gone map[netip.Addr]string) (DNSPlan, error) {
	p := DNSPlan{Name: dns.Fqdn(name), Before: live.Addrs(), beforeTTL: max(live.TTLA, live.TTLAAAA)}
	want := map[netip.Addr]string{}
	for _, e := range edges {
		for _, a := range e.Addrs() {
			want[a] = e.Name
			p.After = append(p.After, a)
		}
	}
	sortAddrs(p.After)
	if len(p.After) == 0 {
		return p, fmt.Errorf("refusing to leave %s without any address: the inventory lists no edge", p.Name)
	}
	// TTL first: a family whose records stay but whose TTL is wrong is
	// rewritten in one UPDATE (delete the RRset and add it back: atomic).
	for _, fam := range []struct {
		t   uint16
		set []netip.Addr
	}{{dns.TypeA, live.A}, {dns.TypeAAAA, live.AAAA}} {
		var keep []netip.Addr
		for _, a := range fam.set {
			if _, ok := want[a]; ok {
				keep = append(keep, a)
			}
		}
		if len(keep) > 0 && live.TTLOf(fam.t) != ttl {
			p.Changes = append(p.Changes, Change{Op: OpTTL, Type: fam.t, Set: fam.set, TTL: ttl})
		}
	}
	for _, a := range p.After {
		if !live.Has(a) {
			p.Changes = append(p.Changes, Change{Op: OpAdd, Addr: a, TTL: ttl, Edge: want[a]})
		}
	}
	for _, a := range p.Before {
		if _, ok := want[a]; !ok {
			p.Changes = append(p.Changes, Change{Op: OpRemove, Addr: a, Edge: gone[a]})
		}
	}
	return p, nil
}

func sortAddrs(a []netip.Addr) { slices.SortFunc(a, func(x, y netip.Addr) int { return x.Compare(y) }) }

// String prints the plan in nsupdate's syntax, one "send" per UPDATE:
// what `fleet dns plan` shows.
func (p DNSPlan) String() string {
	var b strings.Builder
	if len(p.Changes) == 0 {
		fmt.Fprintf(&b, "; %s in sync: %s\n", p.Name, addrList(p.After))
		return b.String()
	}
	fmt.Fprintf(&b, "; %s: %s -> %s (%d updates)\n", p.Name, addrList(p.Before), addrList(p.After), len(p.Changes))
	for _, c := range p.Changes {
		for _, l := range c.lines(p.Name) {
			b.WriteString(l + "\n")
		}
		b.WriteString("send\n")
	}
	return b.String()
}

func addrList(a []netip.Addr) string {
	if len(a) == 0 {
		return "(none)"
	}
	s := make([]string, len(a))
	for i, x := range a {
		s[i] = x.String()
	}
	return strings.Join(s, " ")
}

func rrType(a netip.Addr) string {
	if a.Is4() {
		return "A"
	}
	return "AAAA"
}

// lines is the change in nsupdate's syntax.
func (c Change) lines(name string) []string {
	label := ""
	if c.Edge != "" {
		label = " ; " + c.Edge
	}
	switch c.Op {
	case OpAdd:
		return []string{fmt.Sprintf("update add %s %d IN %s %s%s", name, c.TTL, rrType(c.Addr), c.Addr, label)}
	case OpRemove:
		if c.Edge == "" {
			label = " ; not in the inventory"
		} else {
			label += " (not in the inventory)"
		}
		return []string{fmt.Sprintf("update delete %s IN %s %s%s", name, rrType(c.Addr), c.Addr, label)}
	}
	t := dns.TypeToString[c.Type]
	out := []string{fmt.Sprintf("update delete %s IN %s ; ttl -> %d", name, t, c.TTL)}
	for _, a := range c.Set {
		out = append(out, fmt.Sprintf("update add %s %d IN %s %s", name, c.TTL, t, a))
	}
	return out
}

// Describe is the change in a few words, for progress and error lines.
func (c Change) Describe() string {
	switch c.Op {
	case OpAdd, OpRemove:
		s := fmt.Sprintf("%s %s %s", c.Op, rrType(c.Addr), c.Addr)
		if c.Edge != "" {
			s += " (" + c.Edge + ")"
		}
		return s
	}
	return fmt.Sprintf("ttl %s -> %d", dns.TypeToString[c.Type], c.TTL)
}

// Publisher reads and updates the name's RRsets on the authoritative
// server, RFC 2136 UPDATEs signed with TSIG.
type Publisher struct {
	Server string // host:port
	Zone   string // FQDN
	Name   string // FQDN
	// KeyName, Algorithm (dns.HmacSHA256…) and Secret (base64) sign
	// every UPDATE.
	KeyName, Algorithm, Secret string
	// Timeout bounds each exchange (5 s when zero).
	Timeout time.Duration
	// Dial, when set, replaces net.Dialer (tests, namespaces).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// NewPublisher builds the Publisher for the inventory, whose ValidateDNS
// must have passed.
func NewPublisher(c Config) (*Publisher, error) {
	secret, err := c.DNS.TSIG.LoadSecret()
	if err != nil {
		return nil, err
	}
	return &Publisher{
		Server:    c.DNS.Server,
		Zone:      dns.CanonicalName(c.Zone),
		Name:      dns.CanonicalName(c.Name),
		KeyName:   dns.CanonicalName(c.DNS.TSIG.Name),
		Algorithm: dns.CanonicalName(c.DNS.TSIG.Algorithm),
		Secret:    secret,
	}, nil
}

func (p *Publisher) timeout() time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return 5 * time.Second
}

// exchange sends m over network and returns the answer; the answer of a
// signed request must be signed with the same key.
func (p *Publisher) exchange(ctx context.Context, m *dns.Msg, network string) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout())
	defer cancel()
	var conn net.Conn
	var err error
	if p.Dial != nil {
		conn, err = p.Dial(ctx, network, p.Server)
	} else {
		conn, err = (&net.Dialer{}).DialContext(ctx, network, p.Server)
	}
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	// The whole datagram is read, whatever its size: an answer bigger than
	// the EDNS size asked for is the server's error, not a reason to fail.
	co := &dns.Conn{Conn: conn, TsigSecret: map[string]string{p.KeyName: p.Secret}, UDPSize: dns.MaxMsgSize}
	if err := co.WriteMsg(m); err != nil {
		return nil, err
	}
	for {
		r, err := co.ReadMsg()
		if r != nil && r.Id != m.Id && err == nil {
			continue // a late answer to an earlier query on this socket
		}
		return r, err
	}
}

// Read asks the authoritative server for the name's A and AAAA records.
func (p *Publisher) Read(ctx context.Context) (RRSet, error) {
	set := RRSet{Name: p.Name}
	for _, t := range []uint16{dns.TypeA, dns.TypeAAAA} {
		r, err := p.query(ctx, p.Name, t)
		if err != nil {
			return set, fmt.Errorf("dns: read %s %s from %s: %w", p.Name, dns.TypeToString[t], p.Server, oneLineNetErr(err))
		}
		switch {
		case r.Rcode == dns.RcodeNameError, r.Rcode == dns.RcodeSuccess && len(r.Answer) == 0:
			if !r.Authoritative {
				return set, fmt.Errorf("dns: %s is not authoritative for %s (answer without the AA bit)", p.Server, p.Zone)
			}
			continue
		case r.Rcode != dns.RcodeSuccess:
			return set, fmt.Errorf("dns: read %s %s from %s: %s", p.Name, dns.TypeToString[t], p.Server, dns.RcodeToString[r.Rcode])
		case !r.Authoritative:
			return set, fmt.Errorf("dns: %s is not authoritative for %s (answer without the AA bit)", p.Server, p.Zone)
		}
		for _, rr := range r.Answer {
			if !strings.EqualFold(rr.Header().Name, p.Name) {
				continue
			}
			switch v := rr.(type) {
			case *dns.A:
				a, _ := netip.AddrFromSlice(v.A.To4())
				set.A = append(set.A, a)
				set.TTLA = v.Hdr.Ttl
			case *dns.AAAA:
				a, _ := netip.AddrFromSlice(v.AAAA.To16())
				set.AAAA = append(set.AAAA, a)
				set.TTLAAAA = v.Hdr.Ttl
			}
		}
	}
	sortAddrs(set.A)
	sortAddrs(set.AAAA)
	return set, nil
}

// query asks the server for name's RRset of type t.
func (p *Publisher) query(ctx context.Context, name string, t uint16) (*dns.Msg, error) {
	m := new(dns.Msg).SetQuestion(name, t)
	m.RecursionDesired = false
	// EDNS: a set of many edges comes whole over UDP, up to 1232 bytes
	// (~70 IPv4 edges); beyond, the server truncates (TC) and the set is
	// read again over TCP.
	m.SetEdns0(maxUDPSize, false)
	r, err := p.exchange(ctx, m, "udp")
	if err == nil && r.Truncated {
		r, err = p.exchange(ctx, m, "tcp")
	}
	return r, err
}

// soa reads the zone's SOA record, which an UPDATE is bound to.
func (p *Publisher) soa(ctx context.Context) (*dns.SOA, error) {
	r, err := p.query(ctx, p.Zone, dns.TypeSOA)
	if err != nil {
		return nil, fmt.Errorf("read %s SOA from %s: %w", p.Zone, p.Server, oneLineNetErr(err))
	}
	for _, rr := range r.Answer {
		if soa, ok := rr.(*dns.SOA); ok && strings.EqualFold(soa.Hdr.Name, p.Zone) {
			return soa, nil
		}
	}
	return nil, fmt.Errorf("%s answers no SOA record for %s (%s)", p.Server, p.Zone, dns.RcodeToString[r.Rcode])
}

// oneLineNetErr keeps what an operator needs of a network error.
func oneLineNetErr(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errors.New("no answer (timeout): is the server up and reachable?")
	}
	return err
}

// update is the UPDATE message for one change. With soa, its
// prerequisite is the zone's SOA record as read just before (RFC 2136
// 2.4.2, value-dependent): the serial moves with every change, so the
// message applies once — a copy replayed later, by anyone who captured
// it, is refused (NXRRSET) by any RFC 2136 server, as is an update
// racing another writer.
func (p *Publisher) update(c Change, soa *dns.SOA) *dns.Msg {
	m := new(dns.Msg).SetUpdate(p.Zone)
	if soa != nil {
		pre := dns.Copy(soa)
		pre.Header().Ttl = 0 // RFC 2136 3.2.1: a prerequisite's TTL is zero
		m.Used([]dns.RR{pre})
	}
	switch c.Op {
	case OpAdd:
		m.Insert([]dns.RR{addrRR(p.Name, c.Addr, c.TTL)})
	case OpRemove:
		m.Remove([]dns.RR{addrRR(p.Name, c.Addr, 0)})
	case OpTTL:
		hdr := dns.RR_Header{Name: p.Name, Rrtype: c.Type, Class: dns.ClassINET}
		m.RemoveRRset([]dns.RR{&dns.ANY{Hdr: hdr}})
		var rrs []dns.RR
		for _, a := range c.Set {
			rrs = append(rrs, addrRR(p.Name, a, c.TTL))
		}
		m.Insert(rrs)
	}
	m.SetTsig(p.KeyName, p.Algorithm, 300, time.Now().Unix())
	return m
}

func addrRR(name string, a netip.Addr, ttl uint32) dns.RR {
	if a.Is4() {
		return &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: a.AsSlice()}
	}
	return &dns.AAAA{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: a.AsSlice()}
}

// Apply sends the one UPDATE of c and reads the name back from the server
// to check that the change is there.
func (p *Publisher) Apply(ctx context.Context, c Change) error {
	what := fmt.Sprintf("dns: update %s (%s) on %s", p.Name, c.Describe(), p.Server)
	var used *dns.SOA
	for try := 1; ; try++ {
		soa, err := p.soa(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if used != nil && dns.IsDuplicate(used, soa) {
			// Refused for an SOA the server still answers: it checks
			// another one than it serves (inline signing, PowerDNS
			// SOA-EDIT). Send the change unbound.
			soa = nil
		}
		err = p.send(ctx, p.update(c, soa), what)
		if !errors.Is(err, errZoneMoved) || soa == nil || try == 3 {
			if err != nil {
				return err
			}
			break
		}
		used = soa // another writer changed the zone in between: again
	}
	got, err := p.Read(ctx)
	if err != nil {
		return fmt.Errorf("%s: read back: %w", what, err)
	}
	switch {
	case c.Op == OpAdd && !got.Has(c.Addr):
		return fmt.Errorf("%s: accepted, but the server does not answer %s", what, c.Addr)
	case c.Op == OpRemove && got.Has(c.Addr):
		return fmt.Errorf("%s: accepted, but the server still answers %s", what, c.Addr)
	case c.Op == OpTTL && got.TTLOf(c.Type) != c.TTL:
		return fmt.Errorf("%s: accepted, but the server answers TTL %d", what, got.TTLOf(c.Type))
	}
	return nil
}

// Check proves, changing nothing, that the server accepts the key's
// UPDATEs of the name: it deletes a record no edge can have (A 0.0.0.0),
// which a server applies as a no-op or refuses as any other change.
func (p *Publisher) Check(ctx context.Context) error {
	m := new(dns.Msg).SetUpdate(p.Zone)
	m.Remove([]dns.RR{addrRR(p.Name, netip.IPv4Unspecified(), 0)})
	m.SetTsig(p.KeyName, p.Algorithm, 300, time.Now().Unix())
	return p.send(ctx, m, fmt.Sprintf("dns: check update rights on %s for %s", p.Server, p.Name))
}

// send sends one signed UPDATE and checks its answer.
func (p *Publisher) send(ctx context.Context, m *dns.Msg, what string) error {
	r, err := p.exchange(ctx, m, "tcp")
	if r != nil && r.Rcode != dns.RcodeSuccess {
		// A refusal comes unsigned or signed; either way it is the answer.
		return updateRefused(what, r, p.KeyName)
	}
	if err != nil {
		if errors.Is(err, dns.ErrSig) || errors.Is(err, dns.ErrTime) || errors.Is(err, dns.ErrSecret) {
			return fmt.Errorf("%s: the answer's TSIG does not verify with key %s: %w", what, p.KeyName, err)
		}
		return fmt.Errorf("%s: %w", what, oneLineNetErr(err))
	}
	if r.IsTsig() == nil {
		return fmt.Errorf("%s: the answer is not signed with key %s", what, p.KeyName)
	}
	return nil
}

// errZoneMoved is an UPDATE refused for its SOA prerequisite.
var errZoneMoved = errors.New("another writer?")

func updateRefused(what string, r *dns.Msg, key string) error {
	rcode := dns.RcodeToString[r.Rcode]
	if t := r.IsTsig(); t != nil && t.Error != 0 {
		return fmt.Errorf("%s: the server rejected TSIG key %s: %s (wrong key name, secret or algorithm?)", what, key, dns.RcodeToString[int(t.Error)])
	}
	switch r.Rcode {
	case dns.RcodeNXRrset:
		return fmt.Errorf("%s: NXRRSET: the zone's SOA changed between its read and the update (%w)", what, errZoneMoved)
	case dns.RcodeNotAuth:
		return fmt.Errorf("%s: %s: the server does not accept key %s for this zone (wrong key, or not authoritative)", what, rcode, key)
	case dns.RcodeRefused:
		return fmt.Errorf("%s: REFUSED: key %s may not update this name (update-policy / allow-update)", what, key)
	}
	return fmt.Errorf("%s: %s", what, rcode)
}

// ApplyPlan applies the plan's changes in order, one UPDATE each, calling
// done after each one has been read back. It stops at the first failure.
func (p *Publisher) ApplyPlan(ctx context.Context, plan DNSPlan, done func(Change)) error {
	for _, c := range plan.Changes {
		if err := p.Apply(ctx, c); err != nil {
			return err
		}
		if done != nil {
			done(c)
		}
	}
	return nil
}
