package dlp

import "errors"

// Router evaluates the rules of one LdapProxy.
type Router struct {
	f *File
	p *Proxy
	h *Health
}

// NewRouter returns a Router over p's rules, using h for the OFFLINE state.
func NewRouter(f *File, p *Proxy, h *Health) *Router { return &Router{f: f, p: p, h: h} }

// Selection is the outcome of rule evaluation.
type Selection struct {
	Rule       *Rule    // nil → LdapProxy.default
	Candidates []string // servers in the order to try
}

// SelectUser chooses targets for a connection's identity.
func (r *Router) SelectUser(c *Ctx) (*Selection, error) { return nil, errors.New("not implemented") }

// SelectOperation chooses targets for one operation by OperationRouting rules.
func (r *Router) SelectOperation(c *Ctx) (*Selection, bool) { return nil, false }
