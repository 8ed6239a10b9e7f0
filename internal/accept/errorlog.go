package accept

import (
	"bytes"
	"log"
	"log/slog"
	"time"
)

// ErrorLog is a log.Logger for http.Server.ErrorLog: each line net/http
// writes (an "http: Accept error" per retry when descriptors run out)
// becomes a slog warning msg with the text as err, at most one per
// logWindow; the next says how many were suppressed. now nil is time.Now.
func ErrorLog(l *slog.Logger, msg string, now func() time.Time) *log.Logger {
	return log.New(&errorLog{l: l, msg: msg, limit: NewLimiter(1, logWindow, now)}, "", 0)
}

type errorLog struct {
	l     *slog.Logger
	msg   string
	limit *Limiter
}

func (w *errorLog) Write(p []byte) (int, error) {
	if ok, suppressed := w.limit.Allow(); ok {
		w.l.Warn(w.msg, "err", string(bytes.TrimSpace(p)), "suppressed", suppressed)
	}
	return len(p), nil
}
