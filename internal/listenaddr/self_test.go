package listenaddr

import (
	"testing"
)

func TestSelfTarget(t *testing.T) {
	for _, tc := range []struct {
		listen []string
		target string
		want   string
	}{
		{[]string{"127.0.0.1:636"}, "127.0.0.1:636", "127.0.0.1:636"},
		{[]string{"127.0.0.1:636"}, "localhost:636", "127.0.0.1:636"},
		{[]string{"127.0.0.1:636"}, "[::ffff:127.0.0.1]:636", "127.0.0.1:636"},
		{[]string{"127.0.0.1:636"}, "0.0.0.0:636", "127.0.0.1:636"},
		{[]string{"0.0.0.0:636"}, "127.0.0.1:636", "0.0.0.0:636"},
		{[]string{":636"}, "127.0.0.5:636", ":636"},
		{[]string{"[::]:636"}, "[::1]:636", "[::]:636"},
		{[]string{"10.9.9.9:1", ":636"}, "localhost:636", ":636"},
		{[]string{"127.0.0.1:636"}, "127.0.0.1:637", ""},
		{[]string{"127.0.0.2:636"}, "127.0.0.1:636", ""},
		{[]string{"127.0.0.1:0"}, "127.0.0.1:0", ""},
		{[]string{"0.0.0.0:636"}, "192.0.2.1:636", ""},
		{[]string{"0.0.0.0:636"}, "no-such-host.invalid:636", ""},
	} {
		if got := SelfTarget(tc.listen, tc.target); got != tc.want {
			t.Errorf("SelfTarget(%q, %q) = %q, want %q", tc.listen, tc.target, got, tc.want)
		}
	}
}
