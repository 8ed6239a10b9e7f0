package cli

import (
	"bufio"
	"io"
	"sync"
	"time"
)

// LogWriter batches log lines into fewer writes: a busy edge or origin
// writes one line per connection, and a write(2) each would cost as much as
// part of the relaying. Lines reach w at most logFlush late, and at once when 32
// KiB are pending; Close flushes what is left.
type LogWriter struct {
	mu   sync.Mutex
	b    *bufio.Writer
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

const logFlush = 100 * time.Millisecond

// NewLogWriter starts batching writes to w; Close it before exiting.
func NewLogWriter(w io.Writer) *LogWriter {
	l := &LogWriter{b: bufio.NewWriterSize(w, 32<<10), stop: make(chan struct{}), done: make(chan struct{})}
	go l.loop()
	return l
}

func (l *LogWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogWriter) loop() {
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

func (l *LogWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Flush()
}

// Close flushes and stops the flusher; later calls do nothing.
func (l *LogWriter) Close() {
	l.once.Do(func() { close(l.stop) })
	<-l.done
}
