package faults

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// How late the runtime is.
//
// A call's deadline reaches it through the runtime: the deadline's timer fires,
// a goroutine of the context package cancels the context, and the goroutines
// waiting on it are woken and run. On an overloaded machine each of these steps
// waits for a CPU, and a goroutine that allocates is made to help the garbage
// collector (under the race detector, often), and parked while it cannot: a
// call then returns past its deadline by as much, whatever the library does.
// Measured under a CPU hog beside the matrix (docs/reliability.md, "Calls past
// their deadline under load", 2026-11-28), calls returned up to 1.8s late;
// their execution trace put the time past the deadline in the runtime: waiting
// for the deadline's timer to cancel the context, parked in GC assists, and
// runnable without a CPU; their own code ran for a few milliseconds of it.
//
// So a call's lateness is checked against what the runtime showed while it was
// late, not against a slack widened for the worst machine: the slack (lateSlack)
// bounds what is left once the runtime's part is taken off, which on an idle
// machine is nothing. The runtime's part of a call's lateness is:
//
//   - delivery: how late its deadline reached a goroutine waiting on its
//     context (one of the test's own, made with context.AfterFunc); all of
//     the lateness if the call returned before that goroutine ran (its
//     context had not ended, or no goroutine told of its end had run yet: a
//     call cannot have waited on a deadline the runtime had not delivered);
//   - stall: the longest time, within the call's lateness, that a bystander
//     goroutine (stalls, below), woken by a timer every few milliseconds and
//     allocating as a call does, waited past its timer.

// stalls is the bystander of the matrix's rows, which run in one process; it
// runs while TestMatrix plays them (a call made outside sees no stall).
var stalls stallWatch

// The bystander's beat, what it allocates each beat, and the lag below which a
// beat is not recorded.
const (
	stallBeat  = 5 * time.Millisecond
	stallAlloc = 16 << 10
	stallMin   = 5 * time.Millisecond
)

// stallSink keeps what the bystander allocates on the heap; only its goroutine
// writes it.
var stallSink []byte

// A stallWatch is a bystander goroutine that records how late its timer's
// beats woke it.
type stallWatch struct {
	mu    sync.Mutex
	late  []stallSpan // the beats that woke more than stallMin late, oldest first
	worst time.Duration
	stop  chan struct{}
	done  chan struct{}
}

// A stallSpan is a beat's lag: from when it was due to when it ran.
type stallSpan struct{ from, to time.Time }

// start starts the bystander, forgetting earlier beats.
func (w *stallWatch) start() {
	w.mu.Lock()
	w.late, w.worst = nil, 0
	w.mu.Unlock()
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	go w.run()
}

// end stops the bystander and waits for it; it reports the beats that came
// more than stallMin late and the worst lag.
func (w *stallWatch) end() (late int, worst time.Duration) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.late), w.worst
}

func (w *stallWatch) run() {
	defer close(w.done)
	t := time.NewTimer(stallBeat)
	defer t.Stop()
	for {
		due := time.Now().Add(stallBeat)
		t.Reset(stallBeat)
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		stallSink = make([]byte, stallAlloc) // as a woken call allocates its answer or error
		if lag := time.Since(due); lag > stallMin {
			w.mu.Lock()
			w.late = append(w.late, stallSpan{due, due.Add(lag)})
			w.worst = max(w.worst, lag)
			w.mu.Unlock()
		}
	}
}

// within returns the longest part of [from, to] that one beat spent late.
func (w *stallWatch) within(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var longest time.Duration
	for _, s := range w.late {
		end, begin := s.to, s.from
		if to.Before(end) {
			end = to
		}
		if from.After(begin) {
			begin = from
		}
		longest = max(longest, end.Sub(begin))
	}
	return longest
}

// A lateness is how far past its deadline a call returned, and the runtime's
// part of it (see above).
type lateness struct {
	late, delivery, stall time.Duration
}

// own is what is left of the lateness once the runtime's part is taken off.
func (l lateness) own() time.Duration { return l.late - l.delivery - l.stall }

func (l lateness) String() string {
	return fmt.Sprintf("%v after its deadline (the runtime: its deadline reached a goroutine waiting on it %v late, a bystander goroutine stalled %v meanwhile)",
		l.late.Round(time.Millisecond), l.delivery.Round(time.Millisecond), l.stall.Round(time.Millisecond))
}

// lateness returns c's lateness, once it has returned, with the stalls w saw.
func (c *call) lateness(w *stallWatch) lateness {
	l := lateness{late: c.end.Sub(c.deadline)}
	if l.late <= 0 {
		return lateness{}
	}
	woke := time.Unix(0, c.woke.Load())
	switch {
	case c.woke.Load() == 0, woke.After(c.end):
		l.delivery = l.late
	case woke.After(c.deadline):
		l.delivery = woke.Sub(c.deadline)
	}
	l.stall = min(w.within(c.deadline, c.end), l.late-l.delivery)
	return l
}

// do makes c's call of its tool with args on conn, under a context that ends
// at c.deadline, and records its outcome, and when its deadline reached a
// goroutine waiting on its context (see lateness).
func (c *call) do(conn *mcpfsm.Conn, args map[string]any) {
	ctx, cancel := context.WithDeadline(context.Background(), c.deadline)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { c.woke.Store(time.Now().UnixNano()) })
	res, err := conn.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: args})
	c.end, c.err, c.text = time.Now(), err, text(res)
	stop() // if its context has not ended, the goroutine will never run
}

// checkLate fails the row if c returned more than slack past its deadline once
// the runtime's part is taken off; a call later than slack all the same is
// logged, with the runtime's part.
func (r *run) checkLate(c *call, slack time.Duration) {
	r.t.Helper()
	l := c.lateness(&stalls)
	switch {
	case l.own() > slack:
		r.errorf("call %s returned %v: %v more than the runtime accounts for, where %v is allowed: %v", c.id, l, l.own().Round(time.Millisecond), slack, c.err)
	case l.late > slack:
		r.t.Logf("call %s returned %v: the runtime's lateness, not the call's: %v", c.id, l, c.err)
	}
}

// TestLatenessTakesOffTheRuntime checks the rule that tells a call's own
// lateness from the runtime's: what is left once the delivery of its deadline
// and a bystander's stall within its lateness are taken off.
func TestLatenessTakesOffTheRuntime(t *testing.T) {
	dl := time.Unix(1000, 0)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	at := func(n int) time.Time { return dl.Add(ms(n)) }
	w := &stallWatch{late: []stallSpan{
		{at(-500), at(100)},  // 100ms of it within a lateness from the deadline
		{at(1000), at(1300)}, // 300ms
	}}
	for _, tc := range []struct {
		name      string
		end, woke int // ms from the deadline; woke < -1000: never
		want      lateness
	}{
		{name: "on time", end: -5, woke: -2000, want: lateness{}},
		{name: "late, told at once", end: 900, woke: 2, want: lateness{late: ms(900), delivery: ms(2), stall: ms(100)}},
		{name: "late, told late", end: 1500, woke: 700, want: lateness{late: ms(1500), delivery: ms(700), stall: ms(300)}},
		{name: "returned before its deadline reached anyone", end: 1200, woke: 1250, want: lateness{late: ms(1200), delivery: ms(1200)}},
		{name: "returned before its context ended", end: 400, woke: -2000, want: lateness{late: ms(400), delivery: ms(400)}},
		{name: "stall capped by what is left", end: 1200, woke: 1100, want: lateness{late: ms(1200), delivery: ms(1100), stall: ms(100)}},
	} {
		c := &call{deadline: dl, end: at(tc.end)}
		if tc.woke > -1000 {
			c.woke.Store(at(tc.woke).UnixNano())
		}
		if got := c.lateness(w); got != tc.want {
			t.Errorf("%s: lateness %+v, want %+v", tc.name, got, tc.want)
		}
	}
	// A call late by 1.5s whose deadline came on time, with no stall: all of
	// it is its own.
	c := &call{deadline: dl, end: at(1500)}
	c.woke.Store(at(1).UnixNano())
	if own := c.lateness(&stallWatch{}).own(); own != ms(1499) {
		t.Errorf("own lateness %v, want 1.499s", own)
	}
}
