package listenaddr

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
)

// TestListenOverlap: the pairs Linux refuses to bind both of are reported,
// and the check agrees with the kernel: for each case both addresses are
// really listened on (with the port made concrete), and the second bind
// fails exactly when Overlap says so.
func TestListenOverlap(t *testing.T) {
	for _, tc := range []struct {
		listen []string
		err    string
	}{
		{[]string{":P", "[::]:P"}, `":P" and "[::]:P" are the same socket`},
		{[]string{"0.0.0.0:P", "[::]:P"}, "are the same socket"},
		{[]string{"0.0.0.0:P", "127.0.0.1:P"}, "the wildcard already listens on every address of port P"},
		{[]string{"127.0.0.1:P", ":P"}, "overlap"},
		{[]string{"[::]:P", "[::1]:P"}, "overlap"},
		{[]string{"127.0.0.1:P", "127.0.0.1:P"}, "are the same address"},
		{[]string{"127.0.0.1:P", "[::ffff:127.0.0.1]:P"}, "are the same address"},
		{[]string{"127.0.0.1:P", "127.0.0.2:P"}, ""},
		{[]string{"[::1]:P", "127.0.0.1:P"}, ""},
		{[]string{":P"}, ""},
		{[]string{":0", "[::]:0"}, ""},
	} {
		name := strings.Join(tc.listen, " ")
		t.Run(name, func(t *testing.T) {
			// A port free right now stands for P, so that the kernel can
			// give its verdict on the same addresses.
			probe, perr := net.Listen("tcp", "127.0.0.1:0")
			if perr != nil {
				t.Fatal(perr)
			}
			port := strconv.Itoa(probe.Addr().(*net.TCPAddr).Port)
			probe.Close()
			var listen []string
			for _, l := range tc.listen {
				listen = append(listen, strings.ReplaceAll(l, "P", port))
			}
			want := strings.ReplaceAll(tc.err, "P", port)
			err := Overlap(listen)
			if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
				t.Fatalf("Overlap(%q) = %v, want %q", listen, err, want)
			}
			lc := net.ListenConfig{KeepAlive: -1} // as cmd/edge and cmd/origin listen
			var bindErr error
			for _, l := range listen {
				ln, err := lc.Listen(context.Background(), "tcp", l)
				if err != nil {
					bindErr = err
					break
				}
				defer ln.Close()
			}
			if (bindErr != nil) != (err != nil) {
				t.Fatalf("Overlap says %v, the kernel %v", err, bindErr)
			}
		})
	}
}
