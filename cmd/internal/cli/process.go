package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/edgefleet/edgefleet/internal/accept"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Process is what the edge's and the origin's run share: the signals, the
// batched log writer and its logger, the Prometheus registry (with the Go
// and process collectors) and the HTTP endpoints.
//
//	p := cli.Start("edge", cfg.Log)          // signals are ours from here
//	p.ServeHTTP("metrics", cfg.Metrics, p.Metrics())
//	failed := p.Wait(serveErr, reload)      // SIGTERM/SIGINT, or a listener that failed
//	ctx, cancel := p.Drain(0)               // a second signal cancels ctx
//	e.Shutdown(ctx); cancel()
//	p.Exit(failed)                          // status 1 when a listener failed
type Process struct {
	Name string
	Log  *slog.Logger
	Reg  *prometheus.Registry

	sig     chan os.Signal
	logw    *LogWriter
	servers []*http.Server
}

// Start takes SIGTERM, SIGINT and SIGHUP before anything listens (a SIGHUP
// that comes as soon as a port answers must not end the process) and
// builds the logger for l, writing to stderr.
func Start(name string, l Log) *Process {
	p := &Process{Name: name, sig: make(chan os.Signal, 2), logw: NewLogWriter(os.Stderr)}
	signal.Notify(p.sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	p.Log = Logger(l, p.logw)
	p.Reg = prometheus.NewRegistry()
	p.Reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return p
}

// Fatal ends a process that has not started serving: the log flushed, err
// printed as Die prints it.
func (p *Process) Fatal(err error) {
	p.logw.Close()
	Die(p.Name, err)
}

// Metrics is GET /metrics for p.Reg.
func (p *Process) Metrics() http.Handler { return Metrics(p.Reg) }

// Metrics is GET /metrics for reg, the endpoint every binary serves, on a
// mux that may take more.
func Metrics(reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// HTTPServer is the http.Server of every endpoint of the binaries: h, a
// bound on the wait for a request's header and on a keep-alive
// connection's wait for the next request (without it net/http waits for
// ever, and clients that made one request each hold a descriptor apiece
// of the process that relays), and net/http's own lines (an "http: Accept
// error" per retry when descriptors run out) through log, rate-limited,
// with the endpoint's name.
func HTTPServer(h http.Handler, log *slog.Logger, endpoint string) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: httpIdleTimeout,
		ErrorLog: accept.ErrorLog(log.With("endpoint", endpoint), "http server error", nil)}
}

// httpIdleTimeout is how long an endpoint keeps an idle keep-alive
// connection: longer than a Prometheus scrape interval, so scrapes reuse
// their connection.
const httpIdleTimeout = 2 * time.Minute

// ServeHTTP serves h on addr (nothing when addr is ""); key is the
// configuration key of addr, for the error and the log line. A port that
// cannot be bound ends the process (Fatal).
func (p *Process) ServeHTTP(key, addr string, h http.Handler) {
	if addr == "" {
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		p.Fatal(fmt.Errorf("%s: %w", key, err))
	}
	srv := HTTPServer(h, p.Log, key)
	p.servers = append(p.servers, srv)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.Log.Error("http server stopped", "endpoint", key, "err", err)
		}
	}()
}

// Wait returns nil on SIGTERM or SIGINT, or the first error from failed (a
// listener that really failed); each SIGHUP calls hup. drain is logged
// with the signal, for the operator who waits.
func (p *Process) Wait(failed <-chan error, hup func(), drain time.Duration) error {
	for {
		select {
		case s := <-p.sig:
			if s == syscall.SIGHUP {
				hup()
				continue
			}
			p.Log.Info("shutting down", "signal", s.String(), "drain_timeout", drain)
			return nil
		case err := <-failed:
			p.Log.Error("listener failed", "err", err)
			return err
		}
	}
}

// Drain is the context a shutdown drains under: cancelled by a second
// SIGTERM or SIGINT (SIGHUPs are ignored now) or after timeout (0: no
// bound of its own). Call cancel when the shutdown is done.
func (p *Process) Drain(timeout time.Duration) (ctx context.Context, cancel context.CancelFunc) {
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), timeout)
	} else {
		ctx, cancel = context.WithCancel(context.Background())
	}
	go func() {
		for {
			select {
			case s := <-p.sig:
				if s == syscall.SIGHUP {
					continue
				}
				p.Log.Info("second signal: closing open connections")
				cancel()
			case <-ctx.Done():
			}
			return
		}
	}()
	return ctx, cancel
}

// Exit closes the HTTP endpoints and flushes the log; it ends the process
// with status 1 when failed is not nil and returns otherwise.
func (p *Process) Exit(failed error) {
	for _, srv := range p.servers {
		srv.Close()
	}
	p.logw.Close()
	if failed != nil {
		os.Exit(1)
	}
}

// ExitError is an error with the exit status it ends the binary with.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode is the status (as exec.ExitError names it).
func (e *ExitError) ExitCode() int { return e.Code }

// Exit gives err the exit status code.
func Exit(code int, err error) error { return &ExitError{Code: code, Err: err} }

// Die prints err on stderr and exits. An error with an exit status other
// than ExitConfig (see Exit) prints one line per line of err, each
// prefixed with name (a DLP file's list shows one error a line); any other
// error is a bad configuration: one line, status ExitConfig.
func Die(name string, err error) {
	var ee *ExitError
	if errors.As(err, &ee) && ee.Code != ExitConfig {
		FatalCode(name, err, ee.Code)
	}
	Fatal(name, err)
}
