package machine

import "sync"

// mailbox is how goroutines other than the owner hand it events. Posting never blocks
// and, in steady state, never allocates: events are appended to a slice under a mutex,
// and the owner takes the whole slice at once, handing back the one it finished with
// (double buffering, as etcd/raft hands out its Ready batches). wake holds at most one
// signal: it is sent when the slice goes from empty to non-empty, and the owner drains
// everything on each signal, so no event waits for a later one.
type mailbox struct {
	mu     sync.Mutex
	queue  []Event
	closed bool
	wake   chan struct{}
}

func newMailbox() mailbox { return mailbox{wake: make(chan struct{}, 1)} }

// post appends ev, and reports false if the owner has exited and will never see it.
func (b *mailbox) post(ev Event) bool {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return false
	}
	b.queue = append(b.queue, ev)
	first := len(b.queue) == 1
	b.mu.Unlock()
	if first {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// take returns every event posted so far and gives the mailbox spare, emptied, to fill
// next. The owner passes back the batch it last finished as spare.
func (b *mailbox) take(spare []Event) []Event {
	clear(spare) // drop references to errors and channels of finished events
	b.mu.Lock()
	q := b.queue
	b.queue = spare[:0]
	b.mu.Unlock()
	return q
}

// close stops the mailbox from accepting events and returns those never taken.
func (b *mailbox) close() []Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	q := b.queue
	b.queue = nil
	return q
}
