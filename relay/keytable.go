package relay

import (
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/edgefleet/edgefleet/internal/tokenbucket"
)

// keyTable is one level of admission: per key (a source address masked
// to its prefix), the connections open and a token bucket of new ones.
// It holds at most size keys in a fixed array. A key with connections
// open is pinned; the others form a list, most recently used first, and
// a new key takes the least recently used one's slot (which comes back
// later with a full bucket). When every slot holds open connections, a
// new key is refused: the table fails closed, it never grows. An entry
// costs 48 bytes in the array and about 56 in the index: about 104
// bytes (measured in TestKeyTableBytesPerEntry), 13.6 MB for the default
// 131072 keys.
type keyTable struct {
	conns int
	rate  tokenbucket.Rate
	v4    int
	v6    int

	mu    sync.Mutex
	index map[tableKey]int32
	slots []slot
	size  int
	// head and tail of the list of unpinned slots, most recent first.
	head, tail int32
}

// tableKey is an address masked to the table's prefix, as 16 bytes with
// the prefix length last for IPv4 (an IPv4 key never equals an IPv6 one).
type tableKey [17]byte

type slot struct {
	key        tableKey
	open       int32 // connections open under this key
	prev, next int32 // the unpinned list; noSlot at its ends
	bucket     tokenbucket.Bucket
}

func newKeyTable(l KeyLimit, size int) *keyTable {
	r, _ := rateOf(l.Rate, l.Burst)
	return &keyTable{conns: l.Conns, rate: r, v4: l.V4, v6: l.V6, size: size,
		index: make(map[tableKey]int32), head: noSlot, tail: noSlot}
}

// keyOf masks a to the table's prefix.
func (t *keyTable) keyOf(a netip.Addr) tableKey {
	var k tableKey
	if a.Is4() {
		p, _ := a.Prefix(t.v4)
		b := p.Addr().As4()
		copy(k[:], b[:])
		k[16] = 4
		return k
	}
	p, _ := a.Prefix(t.v6)
	b := p.Addr().As16()
	copy(k[:], b[:])
	k[16] = 6
	return k
}

// take counts a new connection under a's key at now: its slot, or the
// refusal (limit is the level's name in the log line). A nil table
// limits nothing.
func (t *keyTable) take(a netip.Addr, now time.Time, limit string) (int32, *refusal) {
	if t == nil {
		return noSlot, nil
	}
	k := t.keyOf(a)
	t.mu.Lock()
	defer t.mu.Unlock()
	i, ok := t.index[k]
	if !ok {
		if i = t.claim(k); i == noSlot {
			return noSlot, &refusal{limit + ".table_size", ResultConnLimit}
		}
	}
	s := &t.slots[i]
	if t.conns > 0 && int(s.open) >= t.conns {
		t.touch(i)
		return noSlot, &refusal{limit + ".conns", ResultConnLimit}
	}
	if !s.bucket.Allow(now, t.rate) {
		t.touch(i)
		return noSlot, &refusal{limit + ".rate", ResultRateLimited}
	}
	if s.open == 0 {
		t.unlink(i)
	}
	s.open++
	return i, nil
}

// refund releases a connection counted in slot i that a later level
// refused, with the token it took: a refusal elsewhere costs this key
// nothing.
func (t *keyTable) refund(i int32) {
	if t == nil || i == noSlot {
		return
	}
	t.mu.Lock()
	t.slots[i].bucket.Refund(t.rate)
	t.mu.Unlock()
	t.put(i)
}

// put releases a connection counted in slot i.
func (t *keyTable) put(i int32) {
	if t == nil || i == noSlot {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.slots[i]
	s.open--
	if s.open == 0 {
		t.pushFront(i)
	}
}

// claim gives k a slot: a new one while the table has room, else the
// least recently used unpinned one; noSlot when every slot is pinned.
func (t *keyTable) claim(k tableKey) int32 {
	var i int32
	switch {
	case len(t.slots) < t.size:
		if len(t.slots) == cap(t.slots) { // grow, never past size
			t.slots = slices.Grow(t.slots, min(max(2*len(t.slots), 64), t.size)-len(t.slots))
		}
		t.slots = append(t.slots, slot{})
		i = int32(len(t.slots) - 1)
	case t.tail != noSlot:
		i = t.tail
		t.unlink(i)
		delete(t.index, t.slots[i].key)
	default:
		return noSlot
	}
	t.slots[i] = slot{key: k, prev: noSlot, next: noSlot}
	t.index[k] = i
	t.pushFront(i)
	return i
}

// touch moves an unpinned slot to the front of the list.
func (t *keyTable) touch(i int32) {
	if t.slots[i].open == 0 {
		t.unlink(i)
		t.pushFront(i)
	}
}

func (t *keyTable) pushFront(i int32) {
	s := &t.slots[i]
	s.prev, s.next = noSlot, t.head
	if t.head != noSlot {
		t.slots[t.head].prev = i
	}
	t.head = i
	if t.tail == noSlot {
		t.tail = i
	}
}

func (t *keyTable) unlink(i int32) {
	s := &t.slots[i]
	if s.prev != noSlot {
		t.slots[s.prev].next = s.next
	} else if t.head == i {
		t.head = s.next
	}
	if s.next != noSlot {
		t.slots[s.next].prev = s.prev
	} else if t.tail == i {
		t.tail = s.prev
	}
	s.prev, s.next = noSlot, noSlot
}

// len is how many keys the table holds.
func (t *keyTable) len() int {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.index)
}
