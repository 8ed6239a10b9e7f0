package core

import (
	"bytes"
	"testing"
)

// pagedSearch builds a search request with a paging control.
func pagedSearch(size int, cookie string, critical bool) []byte {
	search := berElem(0x63, berElem(0x04, []byte("dc=example,dc=com")), berElem(0x0a, []byte{2}), berElem(0x0a, []byte{0}),
		berInt(0), berInt(0), berElem(0x01, []byte{0}), berElem(0x87, []byte("objectClass")), berElem(0x30))
	ctl := [][]byte{berElem(0x04, []byte(oidPaged))}
	if critical {
		ctl = append(ctl, berElem(0x01, []byte{0xff}))
	}
	ctl = append(ctl, berElem(0x04, berElem(0x30, berInt(size), berElem(0x04, []byte(cookie)))))
	other := berElem(0x30, berElem(0x04, []byte("1.3.6.1.4.1.4203.1.10.1")))
	return berElem(0x30, berInt(5), search, berElem(0xa0, other, berElem(0x30, ctl...)))
}

func TestRestartPaged(t *testing.T) {
	for _, tc := range []struct {
		name     string
		critical bool
	}{{"not critical", false}, {"critical", true}} {
		t.Run(tc.name, func(t *testing.T) {
			raw := pagedSearch(500, "cookie-from-L1", tc.critical)
			_, p, ok := findPaged(raw)
			if !ok || p.size != 500 || p.cookie != "cookie-from-L1" {
				t.Fatalf("findPaged = %+v %v", p, ok)
			}
			got, err := restartPaged(raw, 1500)
			if err != nil {
				t.Fatal(err)
			}
			if want := pagedSearch(1500, "", tc.critical); !bytes.Equal(got, want) {
				t.Fatalf("restartPaged:\n got %x\nwant %x", got, want)
			}
		})
	}
}

// FuzzPaged: the control walker never panics, and a restarted request
// carries exactly the new page size and an empty cookie.
func FuzzPaged(f *testing.F) {
	f.Add(pagedSearch(500, "c", false))
	f.Add(pagedSearch(0, "", true))
	f.Add([]byte{0x30, 0x84, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, raw []byte) {
		findPaged(raw)
		out, err := restartPaged(raw, 77)
		if err != nil {
			return
		}
		if _, p, ok := findPaged(out); ok && (p.size != 77 || p.cookie != "") {
			t.Fatalf("restarted request has %+v", p)
		}
	})
}
