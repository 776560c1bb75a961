package machine

import "sync"

// mailbox is how goroutines other than the owner hand it events, and how the owner
// role passes from one activation to the next.
//
// Posting never blocks and, in steady state, never allocates: events are appended to a
// slice under a mutex, and the owner takes the whole slice at once, handing back the
// one it finished with (double buffering, as etcd/raft hands out its Ready batches).
//
// The owner is a role, not a fixed goroutine. A machine with nothing to do (no event
// queued, no effect running, at most a timer armed) holds no goroutine at all: when the
// owner finds the mailbox empty it gives the role up under the same lock posts take, and
// the next post or timer that finds the role free takes it and runs the owner. So at
// most one goroutine is ever the owner, each activation sees everything the last one
// did (the lock orders them), and no event or timer is left with no owner to see it.
type mailbox struct {
	mu      sync.Mutex
	queue   []Event
	spare   []Event // the other buffer, while no owner holds it
	due     bool    // the timer fired since the owner last looked
	running bool    // some goroutine holds the owner role
	closed  bool
}

// post appends ev. It reports false if the owner has exited for good and will never
// see it, and start when the caller has taken the owner role and must run the owner.
func (b *mailbox) post(ev Event) (ok, start bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false, false
	}
	b.queue = append(b.queue, ev)
	return true, b.claim()
}

// fire records that the timer fired, and reports whether the caller has taken the
// owner role and must run the owner.
func (b *mailbox) fire() (start bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.due = true
	return b.claim()
}

func (b *mailbox) claim() bool {
	if b.running {
		return false
	}
	b.running = true
	return true
}

// take returns every event posted so far and whether the timer fired, and gives the
// mailbox the batch the owner finished (nil on an activation's first take), emptied,
// to fill next. When there is nothing at all, the owner role is given up (release is
// true): the caller must then stop acting as the owner at once, touching nothing of
// the machine's, since another goroutine may already hold the role.
func (b *mailbox) take(finished []Event) (q []Event, due, release bool) {
	clear(finished) // drop references to errors and channels of finished events
	b.mu.Lock()
	defer b.mu.Unlock()
	if finished == nil {
		finished, b.spare = b.spare, nil
	}
	if len(b.queue) == 0 && !b.due {
		b.spare = finished[:0] // kept for the next activation
		b.running = false
		return nil, false, true
	}
	q, due = b.queue, b.due
	b.queue, b.due = finished[:0], false
	return q, due, false
}

// close stops the mailbox from accepting events and returns those never taken. The
// owner role is never handed out again.
func (b *mailbox) close() []Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	q := b.queue
	b.queue = nil
	return q
}
