package main

import (
	"bufio"
	"io"
	"sync"
	"time"
)

// logWriter batches log lines into fewer writes: a busy edge writes one
// line per connection, and a write(2) each would cost as much as part of
// the relaying. Lines reach w at most logFlush late, and at once when 32
// KiB are pending; Close flushes what is left.
type logWriter struct {
	mu   sync.Mutex
	b    *bufio.Writer
	stop chan struct{}
	done chan struct{}
}

const logFlush = 100 * time.Millisecond

func newLogWriter(w io.Writer) *logWriter {
	l := &logWriter{b: bufio.NewWriterSize(w, 32<<10), stop: make(chan struct{}), done: make(chan struct{})}
	go l.loop()
	return l
}

func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logWriter) loop() {
	defer close(l.done)
	t := time.NewTicker(logFlush)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.flush()
		case <-l.stop:
			l.flush()
			return
		}
	}
}

func (l *logWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Flush()
}

// Close flushes and stops the flusher.
func (l *logWriter) Close() {
	close(l.stop)
	<-l.done
}
