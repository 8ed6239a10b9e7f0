package origin

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/edgefleet/edgefleet/internal/inneraddr"
	"github.com/edgefleet/edgefleet/internal/proxyheader"
)

// Header values of Peer.Header and of the header label of
// edgefleet_origin_connections_total.
const (
	HeaderV2    = proxyheader.HeaderV2    // a PROXY v2 header with the client's address
	HeaderV1    = proxyheader.HeaderV1    // a PROXY v1 line with the client's address
	HeaderLocal = proxyheader.HeaderLocal // a v2 LOCAL header or a v1 UNKNOWN line: no client address
	HeaderNone  = proxyheader.HeaderNone  // no header: the connection was forwarded as it came
)

// Peer is what the front knows about the outer connection behind one inner
// connection. Claimed and Measured are never merged: Claimed is what the
// edge's header says the client is, Measured is the socket peer the front
// saw (the edge itself, or the client when there was no edge).
type Peer struct {
	InnerPort int       `json:"inner_port"` // local port of the front's connection to inner
	Claimed   string    `json:"claimed"`    // ip:port from the header, "" when none or LOCAL
	Measured  string    `json:"measured"`   // ip:port of the socket peer
	Edge      string    `json:"edge"`       // TLV 0xE0, the edge's name ("" when absent)
	ID        string    `json:"id"`         // PP2_TYPE_UNIQUE_ID TLV ("" when absent)
	Header    string    `json:"header"`     // v2, v1, local or none
	Since     time.Time `json:"since"`      // when the front accepted the outer connection
	// Inner is the whole local address (ip:port) of the inner connection.
	// It is not served over HTTP (docs/origin.md fixes the keys): the inner
	// service compares it with its client's remote address (LookupAddr).
	Inner string `json:"-"`
	// Share is the front's name for the connection's share of it: the
	// measured IP of a trusted edge, UntrustedShare for every other
	// source. The core queues handshakes by it, so that untrusted sources
	// together take one turn, as they take one share at the front. Not
	// served over HTTP.
	Share string `json:"-"`
}

// PeerTable maps the local port of each inner connection to its Peer. It
// is the only place where the true peer survives once the bytes are inside
// a library that sees a loopback address.
//
// An entry is inserted right after the inner connection is established and
// before its first byte is forwarded. Because the inner service may accept
// (and look itself up) in the instant between the front's connect and that
// insertion, Lookup of a missing port waits for the dials that were in
// flight when it was called; it never waits for dials started later.
type PeerTable struct {
	mu      sync.Mutex
	changed *sync.Cond
	// peers maps a port to its entry in slots. The entries are not the
	// map's values: a map stores a value above 128 bytes (an entry is
	// 152) out of line, one allocation per insert.
	peers    map[int]int32
	slots    []entry
	free     []int32             // indexes of unused slots
	seq      uint64              // last token handed out (dials and entries)
	inflight map[uint64]struct{} // dials not yet settled
}

type entry struct {
	peer  Peer
	token uint64
}

// NewPeerTable returns an empty table.
func NewPeerTable() *PeerTable {
	t := &PeerTable{peers: map[int]int32{}, inflight: map[uint64]struct{}{}}
	t.changed = sync.NewCond(&t.mu)
	return t
}

// Lookup returns the peer behind the inner connection whose local port
// (the inner service's remote port) is port.
func (t *PeerTable) Lookup(port int) (Peer, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	limit := t.seq
	for {
		if i, ok := t.peers[port]; ok {
			return t.slots[i].peer, true
		}
		if !t.dialingBefore(limit) {
			return Peer{}, false
		}
		t.changed.Wait()
	}
}

// LookupAddr is Lookup by the whole address of the inner connection: an
// entry counts only when the inner connection's local address is addr, not
// just its port. Any local process can connect to the inner service from
// another loopback address with the port of a live inner connection (GET
// /peers lists them); it finds no peer here.
func (t *PeerTable) LookupAddr(addr netip.AddrPort) (Peer, bool) {
	p, ok := t.Lookup(int(addr.Port()))
	if !ok || !inneraddr.Is(p.Inner, addr) {
		return Peer{}, false
	}
	return p, true
}

// Len is the number of entries.
func (t *PeerTable) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.peers)
}

// Peers returns every entry, ordered by inner port.
func (t *PeerTable) Peers() []Peer {
	t.mu.Lock()
	out := make([]Peer, 0, len(t.peers))
	for _, i := range t.peers {
		out = append(out, t.slots[i].peer)
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b Peer) int { return a.InnerPort - b.InnerPort })
	return out
}

func (t *PeerTable) dialingBefore(limit uint64) bool {
	for tok := range t.inflight {
		if tok <= limit {
			return true
		}
	}
	return false
}

// beginDial announces a dial whose entry is about to be inserted; the
// returned token is passed to insert (or to endDial when the dial failed).
func (t *PeerTable) beginDial() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	t.inflight[t.seq] = struct{}{}
	return t.seq
}

// endDial settles a dial that produced no entry.
func (t *PeerTable) endDial(token uint64) {
	t.mu.Lock()
	delete(t.inflight, token)
	t.mu.Unlock()
	t.changed.Broadcast()
}

// insert adds p under p.InnerPort and settles the dial token. A stale entry
// for the same port (its connection closed, not yet erased) is replaced.
func (t *PeerTable) insert(token uint64, p Peer) {
	t.mu.Lock()
	i, ok := t.peers[p.InnerPort]
	if !ok {
		if n := len(t.free); n > 0 {
			i, t.free = t.free[n-1], t.free[:n-1]
		} else {
			i = int32(len(t.slots))
			t.slots = append(t.slots, entry{})
		}
		t.peers[p.InnerPort] = i
	}
	t.slots[i] = entry{peer: p, token: token}
	delete(t.inflight, token)
	t.mu.Unlock()
	t.changed.Broadcast()
}

// remove erases the entry for port only if it is still the one inserted
// with token: the kernel may hand the port to a new inner connection
// between the old one's close and this call.
func (t *PeerTable) remove(port int, token uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i, ok := t.peers[port]; ok && t.slots[i].token == token {
		delete(t.peers, port)
		t.slots[i] = entry{} // drops the strings
		t.free = append(t.free, i)
	}
}

// Handler serves GET /peers (a JSON list, ordered by inner port) and
// GET /peers/{port} (one JSON object; 404 when no entry has that port).
func (t *PeerTable) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /peers", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, t.Peers())
	})
	mux.HandleFunc("GET /peers/{port}", func(w http.ResponseWriter, r *http.Request) {
		port, err := strconv.Atoi(r.PathValue("port"))
		if err != nil || port < 1 || port > 65535 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "port must be a number from 1 to 65535"})
			return
		}
		p, ok := t.Lookup(port)
		if !ok {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no peer for inner port " + strconv.Itoa(port)})
			return
		}
		writeJSON(w, http.StatusOK, p)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
