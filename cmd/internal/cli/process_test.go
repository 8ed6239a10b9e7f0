package cli

import (
	"errors"
	"fmt"
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
