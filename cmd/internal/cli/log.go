package cli

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/edgefleet/edgefleet/internal/version"
	"github.com/spf13/cobra"
)

// Log is the `log:` section every binary shares.
type Log struct {
	Format string `mapstructure:"format"` // json or text
	Level  string `mapstructure:"level"`  // debug, info, warn, error
}

// DefaultLog is text at info level.
func DefaultLog() Log { return Log{Format: "text", Level: "info"} }

// Validate names the first bad value.
func (l Log) Validate() error {
	if l.Format != "json" && l.Format != "text" {
		return fmt.Errorf("log.format: %q is not json or text", l.Format)
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(l.Level)); err != nil {
		return fmt.Errorf("log.level: %q is not debug, info, warn or error", l.Level)
	}
	return nil
}

// Logger builds the slog logger for l (which must have passed Validate).
func Logger(l Log, w io.Writer) *slog.Logger {
	var lv slog.Level
	lv.UnmarshalText([]byte(l.Level))
	opts := &slog.HandlerOptions{Level: lv}
	if strings.EqualFold(l.Format, "json") {
		opts.ReplaceAttr = seconds
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts)) // durations as Go durations: 1.5s
}

// seconds writes every duration as a number of seconds (docs/architecture.md):
// slog's JSON handler would write nanoseconds, which no reader expects.
func seconds(groups []string, a slog.Attr) slog.Attr {
	switch {
	case a.Value.Kind() == slog.KindDuration:
		a.Value = slog.Float64Value(a.Value.Duration().Seconds())
	case a.Key == slog.LevelKey && len(groups) == 0:
		// The same text, as a string: with a ReplaceAttr, slog writes a
		// Level value through encoding/json (its MarshalJSON), about a
		// fifth of the cost of a connection's log line.
		if l, ok := a.Value.Any().(slog.Level); ok {
			a.Value = slog.StringValue(l.String())
		}
	}
	return a
}

// Fatal prints err as one line on stderr and exits with ExitConfig.
func Fatal(name string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %s\n", name, strings.ReplaceAll(err.Error(), "\n", "; "))
	os.Exit(ExitConfig)
}

// FatalCode prints err on stderr, each of its lines prefixed with name (a
// list of errors, such as a DLP file's, shows one line per error), and
// exits with code.
func FatalCode(name string, err error, code int) {
	for _, l := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(os.Stderr, "%s: %s\n", name, l)
	}
	os.Exit(code)
}

// Root returns a cobra command with the flags every binary has (--config,
// --version) and quiet error handling: the caller prints errors once.
func Root(name, short string) *cobra.Command {
	c := &cobra.Command{
		Use:           name,
		Short:         short,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	c.PersistentFlags().String("config", "", "YAML configuration file")
	return c
}
