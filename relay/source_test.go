package relay

import "testing"

// TestValidateSource: source is empty or an IP, never a name or host:port.
func TestValidateSource(t *testing.T) {
	for source, ok := range map[string]bool{
		"": true, "127.0.0.2": true, "::1": true, "192.0.2.10": true,
		"edge-a.example": false, "127.0.0.2:0": false, "127.0.0.256": false, " 127.0.0.2": false,
	} {
		cfg := DefaultConfig()
		cfg.Origins = OriginList("origin.example:8636")
		cfg.Source = source
		err := cfg.Validate()
		if ok != (err == nil) {
			t.Errorf("source %q: Validate() = %v, want ok %v", source, err, ok)
		}
		if err != nil && err.Error() != `source: "`+source+`" is not an IP address (empty: the kernel picks)` {
			t.Errorf("source %q: error %q does not name the key and the value", source, err)
		}
	}
}

// TestCheckSelfSource: a source that is not an address of this host is
// refused where the edge runs (New, cmd/edge) with one line, not found out
// as every origin going OFFLINE.
func TestCheckSelfSource(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Origins = OriginList("origin.example:8636")
	cfg.Source = "127.0.0.3"
	if err := cfg.CheckSelf(); err != nil {
		t.Fatalf("source 127.0.0.3 (loopback, local): %v", err)
	}
	cfg.Source = "192.0.2.1" // TEST-NET-1: on no host
	err := cfg.CheckSelf()
	if err == nil || err.Error() != `source: "192.0.2.1" is not an address of this host: bind: cannot assign requested address` {
		t.Fatalf("source 192.0.2.1: %v", err)
	}
	if _, err := New(cfg, nil, nil); err == nil {
		t.Fatal("New accepted a source that is not an address of this host")
	}
}
