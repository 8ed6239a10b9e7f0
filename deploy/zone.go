package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/miekg/dns"
)

// Zone is the embedded server's zone: every RR of it by owner name and
// type. The apex SOA is always there.
type Zone struct {
	Origin string // canonical FQDN
	rrs    map[string]map[uint16][]dns.RR
}

// NewZone is a zone holding only its SOA and one NS record (ns, with
// nsAddr as its address record when given).
func NewZone(origin, ns string, nsAddr string) (*Zone, error) {
	origin = dns.CanonicalName(origin)
	ns = dns.CanonicalName(ns)
	text := fmt.Sprintf("$ORIGIN %s\n@ 60 IN SOA %s hostmaster.%s 1 3600 600 86400 60\n@ 60 IN NS %s\n", origin, ns, origin, ns)
	if nsAddr != "" && dns.IsSubDomain(origin, ns) {
		typ := "A"
		if strings.Contains(nsAddr, ":") {
			typ = "AAAA"
		}
		text += fmt.Sprintf("%s 60 IN %s %s\n", ns, typ, nsAddr)
	}
	return ParseZone([]byte(text), origin)
}

// maxZoneRecords bounds a zone file (a $GENERATE line can make 65535).
const maxZoneRecords = 2000

// ParseZone reads a zone file (RFC 1035 master format, as Marshal writes
// it): exactly one SOA, at the origin, and only names inside the zone.
func ParseZone(b []byte, origin string) (*Zone, error) {
	z := &Zone{Origin: dns.CanonicalName(origin), rrs: map[string]map[uint16][]dns.RR{}}
	if bytes.Contains(bytes.ToUpper(b), []byte("$GENERATE")) {
		return nil, errors.New("$GENERATE is not supported")
	}
	zp := dns.NewZoneParser(strings.NewReader(string(b)), z.Origin, "")
	zp.SetIncludeAllowed(false)
	n := 0
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		if n++; n > maxZoneRecords {
			return nil, fmt.Errorf("more than %d records", maxZoneRecords)
		}
		h := rr.Header()
		h.Name = dns.CanonicalName(h.Name)
		if h.Class != dns.ClassINET {
			return nil, fmt.Errorf("line for %s: class %s: only IN", h.Name, dns.ClassToString[h.Class])
		}
		if !dns.IsSubDomain(z.Origin, h.Name) {
			return nil, fmt.Errorf("%s is outside zone %s", h.Name, z.Origin)
		}
		if h.Rrtype == dns.TypeSOA && h.Name != z.Origin {
			return nil, fmt.Errorf("SOA for %s: only the origin %s has one", h.Name, z.Origin)
		}
		// What Marshal writes must read back the same: records miekg/dns
		// parses but cannot print back (empty names…) are refused.
		if back, err := dns.NewRR(rr.String()); err != nil || back == nil || !dns.IsDuplicate(back, rr) {
			return nil, fmt.Errorf("record %q is not valid", rr.String())
		}
		if h.Rrtype == dns.TypeSOA && len(z.get(h.Name, dns.TypeSOA)) > 0 {
			return nil, errors.New("two SOA records")
		}
		z.add(rr)
	}
	if err := zp.Err(); err != nil {
		return nil, err
	}
	if len(z.get(z.Origin, dns.TypeSOA)) == 0 {
		return nil, fmt.Errorf("no SOA record for %s", z.Origin)
	}
	return z, nil
}

func (z *Zone) get(name string, t uint16) []dns.RR { return z.rrs[name][t] }

// add inserts rr unless an equal record is there; the RRset takes rr's TTL
// (as BIND does), so a set has one TTL.
func (z *Zone) add(rr dns.RR) {
	h := rr.Header()
	if z.rrs[h.Name] == nil {
		z.rrs[h.Name] = map[uint16][]dns.RR{}
	}
	set := z.rrs[h.Name][h.Rrtype]
	for _, o := range set {
		o.Header().Ttl = h.Ttl
	}
	if slices.ContainsFunc(set, func(o dns.RR) bool { return dns.IsDuplicate(o, rr) }) {
		return
	}
	z.rrs[h.Name][h.Rrtype] = append(set, rr)
}

// remove deletes the record equal to rr (ignoring TTL).
func (z *Zone) remove(rr dns.RR) {
	h := rr.Header()
	set := z.rrs[h.Name][h.Rrtype]
	set = slices.DeleteFunc(set, func(o dns.RR) bool { return dns.IsDuplicate(o, rr) })
	z.setRRset(h.Name, h.Rrtype, set)
}

func (z *Zone) setRRset(name string, t uint16, set []dns.RR) {
	if len(set) == 0 {
		delete(z.rrs[name], t)
		if len(z.rrs[name]) == 0 {
			delete(z.rrs, name)
		}
		return
	}
	z.rrs[name][t] = set
}

// clone is a deep copy, for an UPDATE applied all or nothing.
func (z *Zone) clone() *Zone {
	c := &Zone{Origin: z.Origin, rrs: map[string]map[uint16][]dns.RR{}}
	for n, types := range z.rrs {
		c.rrs[n] = map[uint16][]dns.RR{}
		for t, set := range types {
			for _, rr := range set {
				c.rrs[n][t] = append(c.rrs[n][t], dns.Copy(rr))
			}
		}
	}
	return c
}

// count is the number of records, the SOA included.
func (z *Zone) count() int {
	n := 0
	for _, types := range z.rrs {
		for _, set := range types {
			n += len(set)
		}
	}
	return n
}

// SOA is the zone's SOA record.
func (z *Zone) SOA() *dns.SOA { return z.get(z.Origin, dns.TypeSOA)[0].(*dns.SOA) }

// exists reports whether name owns records or has names below it (an
// empty non-terminal exists too).
func (z *Zone) exists(name string) bool {
	if len(z.rrs[name]) > 0 {
		return true
	}
	for n := range z.rrs {
		if strings.HasSuffix(n, "."+name) {
			return true
		}
	}
	return false
}

// Marshal writes the zone file: $ORIGIN, then the SOA, then every record
// sorted by name and type.
func (z *Zone) Marshal() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "; edgefleet embedded DNS server zone (fleet dns serve); written on every update\n$ORIGIN %s\n", z.Origin)
	b.WriteString(z.SOA().String() + "\n")
	var names []string
	for n := range z.rrs {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return dnsLess(names[i], names[j]) })
	for _, n := range names {
		var types []int
		for t := range z.rrs[n] {
			types = append(types, int(t))
		}
		sort.Ints(types)
		for _, t := range types {
			if uint16(t) == dns.TypeSOA {
				continue
			}
			for _, rr := range z.rrs[n][uint16(t)] {
				b.WriteString(rr.String() + "\n")
			}
		}
	}
	return []byte(b.String())
}

// dnsLess orders names by their labels from the right (the zone's apex
// first).
func dnsLess(a, b string) bool {
	la, lb := dns.SplitDomainName(a), dns.SplitDomainName(b)
	for i, j := len(la)-1, len(lb)-1; i >= 0 && j >= 0; i, j = i-1, j-1 {
		if la[i] != lb[j] {
			return la[i] < lb[j]
		}
	}
	return len(la) < len(lb)
}
