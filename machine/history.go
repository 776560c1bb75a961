package machine

import (
	"reflect"
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
		at: t.At.UnixNano(), err: lighten(t.Err), from: from, to: to, trig: tr, cause: t.Cause,
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

// maxKeptLeaf is the longest text of an error leaf a history keeps for errors.Is and
// errors.As; a longer one (a server's 15 MB error message) is kept as capped text only.
const maxKeptLeaf = 4 << 10

// lighten returns what a history keeps of err: its text, capped (see ErrorText), and,
// for errors.Is and errors.As, the leaves of its tree whose own text is short (errnos,
// sentinels, small typed errors). A history holds many errors for a long time: it must
// not hold a hostile server's megabytes for each.
func lighten(err error) error {
	if err == nil {
		return nil
	}
	l := &lightError{text: ErrorText(err)}
	var walk func(e error, depth int)
	walk = func(e error, depth int) {
		if e == nil || depth > 64 || len(l.leaves) >= 16 {
			return
		}
		switch x := e.(type) {
		case interface{ Unwrap() []error }:
			for _, k := range x.Unwrap() {
				walk(k, depth+1)
			}
		case interface{ Unwrap() error }:
			walk(x.Unwrap(), depth+1)
		default:
			if isNil(e) {
				return
			}
			defer func() { _ = recover() }() // a leaf whose Error panics is not kept
			if len(e.Error()) <= maxKeptLeaf {
				l.leaves = append(l.leaves, e)
			}
		}
	}
	walk(err, 0)
	if len(l.text) == len(err.Error()) && len(l.leaves) > 0 && len(err.Error()) <= maxKeptLeaf {
		return err // small already: keep it whole
	}
	return l
}

// isNil reports whether e is a typed nil, whose Error may panic.
func isNil(e error) bool {
	v := reflect.ValueOf(e)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// lightError is an error as a history keeps it: capped text, and the short leaves.
type lightError struct {
	text   string
	leaves []error
}

func (e *lightError) Error() string   { return e.text }
func (e *lightError) Unwrap() []error { return e.leaves }
