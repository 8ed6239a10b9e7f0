package core_test

import (
	"os"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

func TestZZHold(t *testing.T) {
	if os.Getenv("ZZHOLD") == "" {
		t.Skip()
	}
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	os.WriteFile("/tmp/attack-core/url", []byte(sl[0].URL), 0o644)
	time.Sleep(15 * time.Minute)
}
