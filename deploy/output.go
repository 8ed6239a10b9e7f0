package deploy

import (
	"encoding/json"
	"net/netip"

	"github.com/miekg/dns"
)

// PlanJSON is `fleet dns plan --output json`: the plan as data, with field
// names documented in docs/dns-deploy.md that do not change.
type PlanJSON struct {
	Name    string       `json:"name"`   // FQDN
	Before  []string     `json:"before"` // the live set
	After   []string     `json:"after"`  // the inventory's
	InSync  bool         `json:"in_sync"`
	Changes []ChangeJSON `json:"changes"` // one UPDATE each, in the order apply sends them
}

// ChangeJSON is one UPDATE of a PlanJSON.
type ChangeJSON struct {
	Op        string   `json:"op"`                  // ttl, add, remove
	Type      string   `json:"type"`                // A or AAAA
	Address   string   `json:"address,omitempty"`   // add, remove
	Addresses []string `json:"addresses,omitempty"` // ttl: the records rewritten
	TTL       uint32   `json:"ttl,omitempty"`       // ttl, add
	Edge      string   `json:"edge,omitempty"`      // the edge the address belongs or belonged to
}

// JSON is the plan as PlanJSON.
func (p DNSPlan) JSON() PlanJSON {
	j := PlanJSON{Name: p.Name, Before: addrStrings(p.Before), After: addrStrings(p.After), InSync: len(p.Changes) == 0, Changes: []ChangeJSON{}}
	for _, c := range p.Changes {
		cj := ChangeJSON{Op: string(c.Op), TTL: c.TTL, Edge: c.Edge}
		switch c.Op {
		case OpTTL:
			cj.Type = "A"
			if c.Type != dns.TypeA {
				cj.Type = "AAAA"
			}
			cj.Addresses = addrStrings(c.Set)
		default:
			cj.Type, cj.Address = rrType(c.Addr), c.Addr.String()
		}
		j.Changes = append(j.Changes, cj)
	}
	return j
}

// MarshalJSON writes the plan as PlanJSON.
func (p DNSPlan) MarshalJSON() ([]byte, error) { return json.Marshal(p.JSON()) }

func addrStrings(a []netip.Addr) []string {
	out := make([]string, 0, len(a))
	for _, x := range a {
		out = append(out, x.String())
	}
	return out
}

var _ json.Marshaler = DNSPlan{}
