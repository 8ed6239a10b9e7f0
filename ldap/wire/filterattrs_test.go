package wire_test

import (
	"fmt"
	"testing"

	"github.com/edgefleet/edgefleet/ldap/wire"
)

// A filter naming many distinct attributes (a 256 KiB anonymous search
// holds some 30,000) is collected in linear time: every attribute once,
// in order of appearance, duplicates dropped. A quadratic scan took about
// a second of CPU per such PDU before a bind, and minutes at max_pdu.
func TestParseManyFilterAttrs(t *testing.T) {
	const n = 200_000
	var items []byte
	for i := range n {
		items = append(items, presentFilter(fmt.Sprintf("A%d", i))...)
		if i%2 == 0 {
			items = append(items, presentFilter(fmt.Sprintf("a%d", i))...) // a duplicate, in other case
		}
	}
	raw := searchWithFilter(tlv(0xa0, items))
	if len(raw) > wire.DefaultMax {
		t.Fatalf("test PDU of %d bytes is over max_pdu", len(raw))
	}
	m, err := wire.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.FilterAttrs) != n {
		t.Fatalf("%d filter attributes, want %d", len(m.FilterAttrs), n)
	}
	for _, i := range []int{0, 1, n / 2, n - 1} {
		if want := fmt.Sprintf("a%d", i); m.FilterAttrs[i] != want {
			t.Errorf("FilterAttrs[%d] = %q, want %q", i, m.FilterAttrs[i], want)
		}
	}
}

func presentFilter(attr string) []byte { return tlv(0x87, []byte(attr)) }

// tlv encodes one BER element with a long-form length.
func tlv(tag byte, value []byte) []byte {
	n := len(value)
	return append([]byte{tag, 0x84, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, value...)
}

// searchWithFilter is a search request (id 2, base "", scope base) with
// the given encoded filter.
func searchWithFilter(f []byte) []byte {
	var op []byte
	op = append(op, tlv(0x04, nil)...)
	op = append(op, 0x0a, 0x01, 0x00, 0x0a, 0x01, 0x00, 0x02, 0x01, 0x00, 0x02, 0x01, 0x00, 0x01, 0x01, 0x00)
	op = append(op, f...)
	op = append(op, tlv(0x30, nil)...)
	body := append([]byte{0x02, 0x01, 0x02}, tlv(wire.TagSearchRequest, op)...)
	return tlv(0x30, body)
}
