package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
)

// TestExitError: the status travels through wrapping, and the message is
// the wrapped error's.
func TestExitError(t *testing.T) {
	err := fmt.Errorf("fleet apply: %w", Exit(1, errors.New("edge e1 failed its probe")))
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 1 || ee.ExitCode() != 1 {
		t.Fatalf("errors.As(%v) = %v", err, ee)
	}
	if err.Error() != "fleet apply: edge e1 failed its probe" {
		t.Fatalf("message %q", err)
	}
}

// TestHTTPServerBoundsIdle: an endpoint's server bounds both the wait for
// a request's header and an idle keep-alive connection (net/http's zero
// IdleTimeout, with no ReadTimeout, waits for the next request for ever).
func TestHTTPServerBoundsIdle(t *testing.T) {
	srv := HTTPServer(http.NotFoundHandler(), slog.New(slog.DiscardHandler), "metrics")
	if srv.ReadHeaderTimeout <= 0 || srv.IdleTimeout <= 0 {
		t.Fatalf("ReadHeaderTimeout %v, IdleTimeout %v: want both bounded", srv.ReadHeaderTimeout, srv.IdleTimeout)
	}
}
