package benchkit

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestParseCPUList: numbers and ranges as taskset takes them; anything
// else is refused with the item named.
func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"0", []int{0}},
		{"0,1", []int{0, 1}},
		{"0-3, 6", []int{0, 1, 2, 3, 6}},
		{"5-5", []int{5}},
	} {
		set, err := ParseCPUList(tc.in)
		if err != nil {
			t.Errorf("ParseCPUList(%q): %v", tc.in, err)
			continue
		}
		var want unix.CPUSet
		for _, n := range tc.want {
			want.Set(n)
		}
		if set != want {
			t.Errorf("ParseCPUList(%q) = %v CPUs, want %v", tc.in, set.Count(), tc.want)
		}
	}
	for _, in := range []string{"", "a", "3-1", "-1", "0-", "1,,2", "0-1024"} {
		if _, err := ParseCPUList(in); err == nil {
			t.Errorf("ParseCPUList(%q) accepted", in)
		}
	}
}
