package evloop

import "testing"

// TestMaxConnsFor: the default connection limit fits its descriptors in
// RLIMIT_NOFILE (the one connection more would not), capped by the
// relays' own default.
func TestMaxConnsFor(t *testing.T) {
	for _, tc := range []struct {
		nofile              uint64
		extra, reserve, cap int
		want                int
	}{
		{20000, 0, 256, 100000, 7898},      // the edge on a default machine
		{20000, 2, 256, 100000, 4387},      // the front with the core in the process
		{1 << 20, 0, 4096, 100000, 100000}, // the rendered unit's LimitNOFILE: the cap
		{1024, 0, 256, 100000, 307},
		{100, 0, 256, 100000, 1}, // nothing fits: still one
	} {
		got := MaxConnsFor(tc.nofile, tc.extra, tc.reserve, tc.cap)
		if got != tc.want {
			t.Errorf("MaxConnsFor(%d, %d, %d, %d) = %d, want %d", tc.nofile, tc.extra, tc.reserve, tc.cap, got, tc.want)
		}
		if got > 1 && got < tc.cap {
			if need := uint64(DescriptorsFor(got) + tc.extra*got + tc.reserve); need > tc.nofile {
				t.Errorf("%d connections need %d descriptors, over %d", got, need, tc.nofile)
			}
			if need := uint64(DescriptorsFor(got+1) + tc.extra*(got+1) + tc.reserve); need <= tc.nofile {
				t.Errorf("%d connections fit in %d too", got+1, tc.nofile)
			}
		}
	}
}
