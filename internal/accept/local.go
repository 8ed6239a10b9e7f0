package accept

import (
	"bytes"
	"errors"
	"log"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/edgefleet/edgefleet/internal/loglimit"
)

// LocalResources reports whether err is this host running out of a
// resource (file descriptors: EMFILE, ENFILE; buffer or kernel memory:
// ENOBUFS, ENOMEM; ephemeral ports: EADDRNOTAVAIL from connect; room in
// an epoll set: ENOSPC from epoll_ctl): a dial that failed so never left
// the host, and says nothing about the server it was meant for. Such a
// failure must not mark a server OFFLINE (only a connect failure, a
// failed check or an I/O failure the client could not have caused does).
//
// A name lookup's *net.DNSError keeps the resolver's own failure as text
// only ("dial udp 127.0.0.53:53: socket: too many open files"): that
// text is recognised too.
func LocalResources(err error) bool {
	for _, e := range localErrnos {
		if errors.Is(err, e) {
			return true
		}
	}
	var de *net.DNSError
	if errors.As(err, &de) {
		for _, e := range localErrnos {
			if strings.Contains(de.Err, e.Error()) {
				return true
			}
		}
	}
	return false
}

var localErrnos = []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
	syscall.EADDRNOTAVAIL, syscall.ENOSPC}

// DescriptorShortage returns the error of a socket this process could
// not open now for lack of descriptors or memory (it tries one, closed at
// once), or nil. A name lookup that failed during such a shortage may
// have failed for that alone, whatever it says: a resolver that cannot
// open /etc/hosts or its socket answers "no such host" from what it could
// read.
func DescriptorShortage() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		if LocalResources(err) {
			return os.NewSyscallError("socket", err)
		}
		return nil
	}
	syscall.Close(fd)
	return nil
}

// ErrorLog is a log.Logger for http.Server.ErrorLog: each line net/http
// writes (an "http: Accept error" per retry when descriptors run out)
// becomes a slog warning msg with the text as err, at most one per
// logWindow; the next says how many were suppressed. now nil is time.Now.
func ErrorLog(l *slog.Logger, msg string, now func() time.Time) *log.Logger {
	return log.New(&errorLog{l: l, msg: msg, limit: loglimit.New(1, logWindow, now)}, "", 0)
}

type errorLog struct {
	l     *slog.Logger
	msg   string
	limit *loglimit.Limiter
}

func (w *errorLog) Write(p []byte) (int, error) {
	if ok, suppressed := w.limit.Allow(); ok {
		w.l.Warn(w.msg, "err", string(bytes.TrimSpace(p)), "suppressed", suppressed)
	}
	return len(p), nil
}
