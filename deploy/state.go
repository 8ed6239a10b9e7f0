package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// StateFile is the state file's name, beside fleet.yaml.
const StateFile = "fleet.state.json"

// Edge states, as `fleet status` shows them.
const (
	StateNew      = "new"      // in the inventory, not yet published
	StateActive   = "active"   // published
	StateDraining = "draining" // left the inventory; still allowed by the firewall
	StateFailed   = "failed"   // its end-to-end probe failed: not published
)

// State is fleet.state.json: what a convergence has done so far, so that
// an interrupted one resumes where it stopped. It remembers every edge it
// has seen, so that an edge that left fleet.yaml can still be drained and
// dropped by name.
type State struct {
	Version int                   `json:"version"`
	Edges   map[string]*EdgeState `json:"edges"`
}

// EdgeState is one edge's progress.
type EdgeState struct {
	IPv4    string `json:"ipv4,omitempty"`
	IPv6    string `json:"ipv6,omitempty"`
	Metrics string `json:"metrics,omitempty"`
	State   string `json:"state"`
	// LeftDNS is when its last record was removed from DNS (draining).
	LeftDNS time.Time `json:"left_dns,omitzero"`
	// TTL its records had: resolvers may hold them that long after LeftDNS.
	TTL uint32 `json:"ttl,omitempty"`
	// Error is the last failed probe (failed).
	Error string `json:"error,omitempty"`
}

// Edge is the state entry as an inventory edge.
func (e *EdgeState) Edge(name string) Edge {
	return Edge{Name: name, IPv4: e.IPv4, IPv6: e.IPv6, Metrics: e.Metrics}
}

// NewState is an empty state.
func NewState() *State { return &State{Version: 1, Edges: map[string]*EdgeState{}} }

// LoadState reads the state file; a missing one is an empty state.
func LoadState(path string) (*State, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return NewState(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	s, err := ParseState(b)
	if err != nil {
		return nil, fmt.Errorf("state %s: %w (it holds the progress of an interrupted change: fix it, or move it away to start over)", path, err)
	}
	return s, nil
}

// ParseState parses and checks a state file's content.
func ParseState(b []byte) (*State, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	s := NewState()
	if err := dec.Decode(s); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line := bytes.Count(b[:min(int(se.Offset), len(b))], []byte("\n")) + 1
			return nil, fmt.Errorf("line %d: %v", line, se)
		}
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	if s.Version != 1 {
		return nil, fmt.Errorf("version %d: want 1", s.Version)
	}
	if s.Edges == nil {
		s.Edges = map[string]*EdgeState{}
	}
	for name, e := range s.Edges {
		if e == nil {
			return nil, fmt.Errorf("edge %q: null", name)
		}
		if !edgeName.MatchString(name) {
			return nil, fmt.Errorf("edge %q: not an edge name", name)
		}
		switch e.State {
		case StateNew, StateActive, StateDraining, StateFailed:
		default:
			return nil, fmt.Errorf("edge %q: state %q is not new, active, draining or failed", name, e.State)
		}
		for _, a := range []string{e.IPv4, e.IPv6} {
			if a == "" {
				continue
			}
			if _, err := netip.ParseAddr(a); err != nil {
				return nil, fmt.Errorf("edge %q: %q is not an IP address", name, a)
			}
		}
		if e.IPv4 == "" && e.IPv6 == "" {
			return nil, fmt.Errorf("edge %q: no address", name)
		}
	}
	return s, nil
}

// Marshal is the file's content: indented JSON, edges sorted by name.
func (s *State) Marshal() []byte {
	b, _ := json.MarshalIndent(s, "", "  ")
	return append(b, '\n')
}

// Save writes the state atomically.
func (s *State) Save(path string) error { return WriteFileAtomic(path, s.Marshal(), 0o600) }

// Names maps every address the state knows to its edge's name.
func (s *State) Names() map[netip.Addr]string {
	m := map[netip.Addr]string{}
	for name, e := range s.Edges {
		for _, a := range e.Edge(name).Addrs() {
			m[a] = name
		}
	}
	return m
}

// Sorted returns the edge names in order.
func (s *State) Sorted() []string {
	var names []string
	for n := range s.Edges {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LockState takes the state file's lock (fleet.state.json.lock, flock):
// one convergence at a time per inventory. The lock goes with the process,
// so a killed command leaves none behind.
func LockState(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("state %s: another fleet apply or rotate is running on this inventory", path)
		}
		return nil, fmt.Errorf("state lock %s: %w", path+".lock", err)
	}
	return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}
