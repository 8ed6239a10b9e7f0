package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// coreSection is the `core:` section of the origin's configuration (DESIGN.md
// §4). This is the seam between the front (main.go) and the LDAP routing
// core: main.go only calls defaultCore and startCore.
type coreSection struct {
	Enabled bool `mapstructure:"enabled"`
}

func defaultCore() coreSection { return coreSection{Enabled: false} }

// startCore starts the LDAP routing core when enabled. peers is the front's
// peer table (for claimed/measured lookups by the core's client port), mux is
// the peers_api mux (the core adds GET /backends). An error that carries an
// exit status implements interface{ ExitCode() int } (19 for a bad DLP file).
func startCore(cfg coreSection, peers any, mux *http.ServeMux, log *slog.Logger, reg prometheus.Registerer) (stop func(context.Context) error, err error) {
	return func(context.Context) error { return nil }, nil
}
