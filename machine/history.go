package machine

import (
	"sync"
	"time"

	"github.com/mcpfsm/mcpfsm/states"
)

// DefaultHistory is how many transitions a machine remembers unless told otherwise.
const DefaultHistory = 32

// history is a ring of a machine's latest transitions, kept compact (a record is 40
// bytes) because thousands of machines may each keep one. It grows to its limit as
// transitions happen, so a machine that has done little holds little.
type history struct {
	mu    sync.Mutex
	limit int
	recs  []record
	next  int // where the next record goes once recs is full
	spec  *Spec
}

type record struct {
	at       int64 // UnixNano
	err      error
	from, to sid
	trig     trig
	cause    states.Cause
	failures uint16
	attempts uint16
	seq      uint32
}

func (h *history) add(t *Transition, from, to sid, tr trig) {
	r := record{
		at: t.At.UnixNano(), err: t.Err, from: from, to: to, trig: tr, cause: t.Cause,
		failures: clamp16(t.Failures), attempts: clamp16(t.Attempts), seq: uint32(t.Seq),
	}
	h.mu.Lock()
	if len(h.recs) < h.limit {
		h.recs = append(h.recs, r)
	} else if h.limit > 0 {
		h.recs[h.next] = r
		h.next = (h.next + 1) % h.limit
	}
	h.mu.Unlock()
}

func (h *history) snapshot() []Transition {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Transition, 0, len(h.recs))
	for i := range h.recs {
		r := h.recs[(h.next+i)%len(h.recs)]
		out = append(out, Transition{
			Seq: uint64(r.seq), At: time.Unix(0, r.at), From: h.spec.name(r.from), To: h.spec.name(r.to),
			Trigger: h.spec.trigName(r.trig), Cause: r.cause, Err: r.err,
			Failures: int(r.failures), Attempts: int(r.attempts),
		})
	}
	return out
}

func clamp16(n int) uint16 {
	if n > 0xffff {
		return 0xffff
	}
	return uint16(n)
}
