package core

import (
	"encoding/json"
	"math"
	"net/http"
	"time"
)

// BackendState is one LdapServer as GET /backends shows it.
type BackendState struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
	// Up is true when the server is selectable. State says why not:
	// "offline" after a session's connect or I/O failure (for
	// OfflineRetryTimeout), "down" while the monitor's checks fail.
	Up          bool   `json:"up"`
	State       string `json:"state"`
	LastFailure string `json:"last_failure,omitempty"` // RFC 3339
	// InFlight is the operations sent to the server and not yet over;
	// Saturation is InFlight ÷ Capacity × 100 smoothed over
	// MonitorInterval, in percent (100 when not up).
	InFlight   int     `json:"in_flight"`
	Capacity   int     `json:"capacity"`
	Saturation float64 `json:"saturation"`
	// The monitor's last check: when, how long it took, and its error.
	LastCheck     string  `json:"last_check,omitempty"`
	CheckDuration float64 `json:"check_duration,omitempty"` // seconds
	CheckError    string  `json:"check_error,omitempty"`
}

// Backends is the state of every LdapServer, in file order (none in plain
// mode).
func (s *Server) Backends() []BackendState {
	out := []BackendState{}
	if s.file == nil {
		return out
	}
	for _, name := range s.file.ServerOrder {
		out = append(out, s.backendState(name))
	}
	return out
}

func (s *Server) backendState(name string) BackendState {
	b := BackendState{Name: name, Addr: s.file.Servers[name].Addr(), Up: !s.health.Offline(name), State: "up",
		InFlight: s.load.InFlight(name), Capacity: s.load.Capacity(name), Saturation: 100}
	switch {
	case s.health.Down(name):
		b.State = "down"
	case !b.Up:
		b.State = "offline"
	default:
		b.Saturation = math.Round(s.load.Saturation(name)*100) / 100
	}
	if t := s.health.LastFailure(name); !t.IsZero() {
		b.LastFailure = t.UTC().Format(time.RFC3339)
	}
	if r, ok := s.monitor.lastCheck(name); ok {
		b.LastCheck = r.at.UTC().Format(time.RFC3339)
		b.CheckDuration = r.duration.Seconds()
		if r.err != nil {
			b.CheckError = r.err.Error()
		}
	}
	return b
}

// BackendsHandler serves GET /backends: Backends as a JSON list.
func (s *Server) BackendsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.Backends())
	})
}
