package main

import (
	"bytes"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// writeQueue is how many writes a queuedWriter holds while they wait for the reader
// to take what came before.
const writeQueue = 256

// A queuedWriter writes to w on a goroutine of its own, in order, so that an output
// nobody reads (a pipe the host or the next command does not drain) holds up no
// goroutine that must not wait: serve's loop logging, a connection's owner reporting
// its transitions. A write that finds the queue full is dropped (Write) or waits for
// room a bounded time (waiting), then is dropped; what was dropped is counted, and
// said (with the text dropped makes, if not nil) once the queue moves again. The
// first error of w (EPIPE: the reader is gone) closes gone.
type queuedWriter struct {
	mu      sync.RWMutex // held to send (read) and to close (write)
	closed  bool
	queue   chan []byte
	dropped atomic.Int64
	said    func(n int) []byte
	done    chan struct{}
	gone    chan struct{}
}

func newQueuedWriter(w io.Writer, dropped func(n int) []byte) *queuedWriter {
	l := &queuedWriter{queue: make(chan []byte, writeQueue), said: dropped, done: make(chan struct{}), gone: make(chan struct{})}
	go func() {
		defer close(l.done)
		failed := false
		for b := range l.queue {
			if failed {
				continue
			}
			if _, err := w.Write(b); err != nil {
				failed = true
				close(l.gone)
			}
		}
	}()
	return l
}

// Write implements io.Writer: it queues p, or drops it if the queue is full. It
// never fails.
func (l *queuedWriter) Write(p []byte) (int, error) {
	l.put(p, 0)
	return len(p), nil
}

// waiting returns a writer to l whose writes wait up to d for room in the queue.
func (l *queuedWriter) waiting(d time.Duration) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		l.put(p, d)
		return len(p), nil
	})
}

func (l *queuedWriter) put(p []byte, wait time.Duration) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return
	}
	if n := l.dropped.Load(); n > 0 && l.said != nil {
		select {
		case l.queue <- l.said(int(n)):
			l.dropped.Add(-n)
		default:
		}
	}
	b := bytes.Clone(p)
	select {
	case l.queue <- b:
		return
	default:
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case l.queue <- b:
			return
		case <-t.C:
		case <-l.gone:
		}
	}
	l.dropped.Add(1)
}

// close stops taking writes, and waits up to d for those queued to be written.
func (l *queuedWriter) close(d time.Duration) {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.queue)
	}
	l.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.done:
	case <-t.C:
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
