package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/edgefleet/edgefleet/internal/safefile"
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
	Version int `json:"version"`
	// Inventory is the fleet the state belongs to: a state file of another
	// inventory is refused, never acted on.
	Inventory *InventoryID `json:"inventory,omitempty"`
	// TTLChanges are the TTLs the name's records had before a change that
	// resolvers may still hold.
	TTLChanges []TTLChange           `json:"ttl_changes,omitempty"`
	Edges      map[string]*EdgeState `json:"edges"`
	// Withdrawn are the inventory edges `fleet watch` took out of DNS
	// (watch.go): every convergence leaves them unpublished.
	Withdrawn map[string]Withdrawal `json:"withdrawn,omitempty"`
}

// InventoryID names an inventory: its DNS name, zone and origin ports.
type InventoryID struct {
	Name  string `json:"name"`
	Zone  string `json:"zone"`
	Ports []int  `json:"ports"`
}

// IDOf is the inventory's identity as the state file records it.
func IDOf(c Config) *InventoryID {
	ports := c.Ports()
	return &InventoryID{Name: canonical(c.Name), Zone: canonical(c.Zone), Ports: ports}
}

func canonical(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

func (id *InventoryID) String() string {
	return fmt.Sprintf("name %s, zone %s, origin ports %v", id.Name, id.Zone, id.Ports)
}

// TTLChange is one TTL replaced: resolvers that fetched the records just
// before Replaced may hold them TTL seconds longer.
type TTLChange struct {
	TTL      uint32    `json:"ttl"`
	Replaced time.Time `json:"replaced"`
}

// Until is when the last copy of the replaced records expires.
func (t TTLChange) Until() time.Time { return t.Replaced.Add(time.Duration(t.TTL) * time.Second) }

// RecordTTL records that records of TTL old were replaced at now, and
// forgets the changes no resolver can hold any more.
func (s *State) RecordTTL(old uint32, now time.Time) {
	s.TTLChanges = slices.DeleteFunc(s.TTLChanges, func(t TTLChange) bool { return !t.Until().After(now) })
	if old > 0 {
		s.TTLChanges = append(s.TTLChanges, TTLChange{TTL: old, Replaced: now})
	}
	if len(s.TTLChanges) == 0 {
		s.TTLChanges = nil
	}
}

// HeldUntil is the latest time a resolver may hold a record replaced by a
// TTL change.
func (s *State) HeldUntil() time.Time {
	var t time.Time
	for _, c := range s.TTLChanges {
		if c.Until().After(t) {
			t = c.Until()
		}
	}
	return t
}

// Adopt checks that the state belongs to the inventory c, and records c as
// its inventory when it names none (an empty state, or one written before
// states named theirs).
func (s *State) Adopt(c Config, path string) error {
	id := IDOf(c)
	if o := s.Inventory; o != nil && len(s.Edges) > 0 && (o.Name != id.Name || o.Zone != id.Zone || !slices.Equal(o.Ports, id.Ports)) {
		return fmt.Errorf("state %s belongs to another inventory (%s), not this one (%s): refusing to act on it (the state file must sit beside its own fleet.yaml; if this is the same fleet renamed, move the state away: every live address not in fleet.yaml is drained in the safe order all the same)", path, s.Inventory, id)
	}
	s.Inventory = id
	return nil
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
func NewState() *State { return &State{Version: stateVersion, Edges: map[string]*EdgeState{}} }

// stateVersion is the version Marshal writes; version 1 (no inventory
// name, no TTL changes) is read too.
const stateVersion = 2

// LoadState reads the state file; a missing one is an empty state.
func LoadState(path string) (*State, error) {
	b, err := safefile.Read(path, safefile.MaxConfig, nil)
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
	if s.Version != 1 && s.Version != stateVersion {
		return nil, fmt.Errorf("version %d: want 1 or %d", s.Version, stateVersion)
	}
	s.Version = stateVersion
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
	for name, w := range s.Withdrawn {
		if !edgeName.MatchString(name) {
			return nil, fmt.Errorf("withdrawn %q: not an edge name", name)
		}
		for _, a := range []string{w.IPv4, w.IPv6} {
			if _, err := netip.ParseAddr(a); a != "" && err != nil {
				return nil, fmt.Errorf("withdrawn %q: %q is not an IP address", name, a)
			}
		}
		if w.Rechecking && !w.FirewalledOut.IsZero() {
			return nil, fmt.Errorf("withdrawn %q: rechecking and firewalled out at once", name)
		}
		if w.FailedRechecks < 0 {
			return nil, fmt.Errorf("withdrawn %q: failed_rechecks %d is negative", name, w.FailedRechecks)
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
func (s *State) Save(path string) error {
	s.Version = stateVersion
	return WriteFileAtomic(path, s.Marshal(), 0o600)
}

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

// ErrLocked is LockState's error while another command holds the lock.
var ErrLocked = errors.New("another fleet command that changes DNS or the firewall (apply, rotate, watch, firewall apply|remove|watch, dns apply) is running on this inventory")

// LockState takes the state file's lock (fleet.state.json.lock, flock):
// one writer of DNS and the firewall at a time per inventory. A lock held
// for a moment (a round of `fleet firewall watch`) is waited for, up to
// LockWait; one held longer is an error. The lock goes with the process,
// so a killed command leaves none behind.
func LockState(path string) (unlock func(), err error) { return lockState(path, LockWait) }

// TryLockState is LockState without the wait: `fleet firewall watch`
// skips its round instead.
func TryLockState(path string) (unlock func(), err error) { return lockState(path, 0) }

// LockWait is how long LockState waits for a lock held by another command.
var LockWait = 3 * time.Second

func lockState(path string, wait time.Duration) (unlock func(), err error) {
	f, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state lock: %w", err)
	}
	deadline := time.Now().Add(wait)
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) || !time.Now().Before(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("state %s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("state lock %s: %w", path+".lock", err)
	}
	return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}
