package origin

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPeerTableInsertRemove(t *testing.T) {
	tb := NewPeerTable()
	tok := tb.beginDial()
	p := Peer{InnerPort: 40000, Claimed: "192.0.2.1:5", Measured: "127.0.0.2:6", Header: HeaderV2}
	tb.insert(tok, p)
	if got, ok := tb.Lookup(40000); !ok || got != p {
		t.Fatalf("Lookup = %+v, %v", got, ok)
	}
	// The port is reused by a new inner connection before the old one is
	// erased: the old erase must not remove the new entry.
	tok2 := tb.beginDial()
	p2 := p
	p2.Claimed = "192.0.2.2:7"
	tb.insert(tok2, p2)
	tb.remove(40000, tok)
	if got, ok := tb.Lookup(40000); !ok || got != p2 {
		t.Fatalf("stale remove erased the new entry: %+v, %v", got, ok)
	}
	tb.remove(40000, tok2)
	if _, ok := tb.Lookup(40000); ok || tb.Len() != 0 {
		t.Fatalf("entry left after remove (len %d)", tb.Len())
	}
}

// TestLookupWaitsForDialInFlight: the inner service may accept and look
// itself up before the front has inserted the entry of the dial that
// produced that connection; Lookup waits for it instead of missing it.
func TestLookupWaitsForDialInFlight(t *testing.T) {
	tb := NewPeerTable()
	tok := tb.beginDial()
	got := make(chan bool, 1)
	go func() { _, ok := tb.Lookup(41000); got <- ok }()
	select {
	case <-got:
		t.Fatal("Lookup returned while the dial was in flight")
	case <-time.After(20 * time.Millisecond):
	}
	tb.insert(tok, Peer{InnerPort: 41000})
	if !<-got {
		t.Fatal("Lookup missed the entry inserted by the dial it waited for")
	}

	// A failed dial releases waiters with a miss.
	tok = tb.beginDial()
	go func() { _, ok := tb.Lookup(41001); got <- ok }()
	tb.endDial(tok)
	if <-got {
		t.Fatal("Lookup found an entry no one inserted")
	}

	if _, ok := tb.Lookup(41002); ok {
		t.Fatal("found an unknown port")
	}
}

func TestPeersAPI(t *testing.T) {
	tb := NewPeerTable()
	since := time.Date(2026, 11, 29, 21, 30, 0, 0, time.UTC)
	tb.insert(tb.beginDial(), Peer{InnerPort: 50001, Claimed: "192.0.2.10:50000", Measured: "127.0.0.2:41234", Edge: "edge-ams-1", ID: "c0ffee", Header: HeaderV2, Since: since})
	tb.insert(tb.beginDial(), Peer{InnerPort: 50000, Claimed: "", Measured: "198.51.100.7:2222", Header: HeaderNone, Since: since})
	srv := httptest.NewServer(tb.Handler())
	defer srv.Close()

	get := func(path string) (int, []byte) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", path, ct)
		}
		return resp.StatusCode, b
	}

	code, body := get("/peers")
	if code != 200 {
		t.Fatalf("/peers: %d %s", code, body)
	}
	var list []map[string]any
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0]["inner_port"] != float64(50000) || list[1]["inner_port"] != float64(50001) {
		t.Fatalf("/peers not ordered by inner_port: %s", body)
	}
	wantKeys := []string{"claimed", "edge", "header", "id", "inner_port", "measured", "since"}
	for _, obj := range list {
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range obj {
				if !yield(k) {
					return
				}
			}
		})
		if !reflect.DeepEqual(keys, wantKeys) {
			t.Fatalf("keys %v, want %v", keys, wantKeys)
		}
	}

	code, body = get("/peers/50001")
	if code != 200 {
		t.Fatalf("/peers/50001: %d %s", code, body)
	}
	var one map[string]any
	json.Unmarshal(body, &one)
	want := map[string]any{
		"inner_port": float64(50001), "claimed": "192.0.2.10:50000", "measured": "127.0.0.2:41234",
		"edge": "edge-ams-1", "id": "c0ffee", "header": "v2", "since": "2026-11-29T21:30:00Z",
	}
	if !reflect.DeepEqual(one, want) {
		t.Fatalf("/peers/50001 = %v, want %v", one, want)
	}
	if code, body := get("/peers/50000"); code != 200 || !json.Valid(body) {
		t.Fatalf("/peers/50000: %d %s", code, body)
	} else if json.Unmarshal(body, &one); one["claimed"] != "" {
		t.Fatalf("claimed of a headerless peer = %v, want \"\"", one["claimed"])
	}

	for path, wantCode := range map[string]int{"/peers/50002": 404, "/peers/abc": 400, "/peers/0": 400, "/peers/70000": 400} {
		if code, _ := get(path); code != wantCode {
			t.Errorf("%s: %d, want %d", path, code, wantCode)
		}
	}

	empty := httptest.NewServer(NewPeerTable().Handler())
	defer empty.Close()
	resp, err := http.Get(empty.URL + "/peers")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "[]\n" {
		t.Fatalf("empty /peers = %q, want []", b)
	}
}

// LookupAddr matches the whole inner address: the same port on another
// loopback address is no peer.
func TestPeerTableLookupAddr(t *testing.T) {
	tb := NewPeerTable()
	p := Peer{InnerPort: 40000, Claimed: "192.0.2.1:5", Measured: "127.0.0.2:6", Header: HeaderV2, Inner: "127.0.0.1:40000"}
	tb.insert(tb.beginDial(), p)
	for addr, want := range map[string]bool{
		"127.0.0.1:40000":          true,
		"[::ffff:127.0.0.1]:40000": true,
		"127.0.0.2:40000":          false,
		"127.0.0.1:40001":          false,
		"[::1]:40000":              false,
	} {
		got, ok := tb.LookupAddr(netip.MustParseAddrPort(addr))
		if ok != want || (ok && got != p) {
			t.Errorf("LookupAddr(%s) = %+v, %v; want %v", addr, got, ok, want)
		}
	}
	if got, ok := tb.Lookup(40000); !ok || got != p {
		t.Errorf("Lookup by port = %+v, %v", got, ok)
	}
	// Inner is not served: /peers keeps exactly the documented keys.
	b, _ := json.Marshal(p)
	if strings.Contains(string(b), "127.0.0.1:40000") || strings.Contains(string(b), "inner\"") {
		t.Errorf("JSON of a peer shows the inner address: %s", b)
	}
}
