package machine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrEffectTimeout is the cause (context.Cause) of an invoked effect's context when the
// effect outlived its timeout policy. It matches context.DeadlineExceeded.
var ErrEffectTimeout = fmt.Errorf("timed out: %w", context.DeadlineExceeded)

// ErrClosed is the cause of an invoked effect's context when Close interrupted it, and
// the error of operations on a machine that has closed.
var ErrClosed = errors.New("machine closed")

// effectCtx gives invoked effects a context that ends at their timeout, or when Close
// interrupts them. One context serves a machine's effects one after another until it is
// spent (it timed out or was canceled), so that running an effect does not allocate. Its
// deadline is one timer per machine, re-armed only when an earlier deadline is needed
// and stopped when the owner goes idle; in the common case starting and ending an
// effect is two atomic stores. The context has no Deadline: effects see only that it is
// done, and context.Cause says why.
//
// Times are kept as durations since base, a monotonic reading, so that they fit in
// atomics and wall-clock jumps do not move deadlines.
type effectCtx struct {
	base    time.Time
	due     atomic.Int64 // deadline of the running effect since base; 0 when none runs
	firesAt atomic.Int64 // when timer fires, since base; 0 when stopped
	spent   atomic.Bool  // ctx has been canceled

	// closing is the machine's Close flag; interruptible says whether the running
	// effect began before close was applied, and so is Close's to interrupt.
	closing       *atomic.Bool
	interruptible atomic.Bool

	mu     sync.Mutex // serializes changes to the timer and cancel with expire
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
}

func (x *effectCtx) init(now time.Time, closing *atomic.Bool) {
	x.base = now
	x.closing = closing
	x.ctx, x.cancel = context.WithCancelCause(context.Background())
	x.timer = time.AfterFunc(time.Hour, x.expire)
	x.timer.Stop()
}

// begin returns the context for an effect that must end by due. Only the owner calls
// it. An interruptible effect that begins as Close is asked is interrupted at once:
// begin stores due and then reads closing, Close sets closing and then reads due, so
// one of them sees the other.
func (x *effectCtx) begin(now, due time.Time, interruptible bool) context.Context {
	d := max(1, int64(due.Sub(x.base)))
	x.interruptible.Store(interruptible)
	x.due.Store(d)
	if fires := x.firesAt.Load(); x.spent.Load() || fires == 0 || fires > d {
		x.mu.Lock()
		if x.spent.Load() {
			x.ctx, x.cancel = context.WithCancelCause(context.Background())
			x.spent.Store(false)
		}
		if fires := x.firesAt.Load(); fires == 0 || fires > d {
			x.timer.Reset(due.Sub(now))
			x.firesAt.Store(d)
		}
		x.mu.Unlock()
	}
	if interruptible && x.closing.Load() {
		x.interrupt(ErrClosed)
	}
	return x.ctx
}

// end marks the running effect finished. The timer stays armed until idle.
func (x *effectCtx) end() { x.due.Store(0) }

// idle stops the timer while no effect runs, so an idle machine wakes for nothing.
func (x *effectCtx) idle() {
	if x.due.Load() != 0 || x.firesAt.Load() == 0 {
		return
	}
	x.mu.Lock()
	if x.due.Load() == 0 {
		x.timer.Stop()
		x.firesAt.Store(0)
	}
	x.mu.Unlock()
}

// interrupt cancels the running effect, if any and if interruptible, with cause. Any
// goroutine may call it.
func (x *effectCtx) interrupt(cause error) {
	x.mu.Lock()
	if x.due.Load() != 0 && x.interruptible.Load() {
		x.cancel(cause)
		x.spent.Store(true)
	}
	x.mu.Unlock()
}

// stop releases the timer; the machine is done.
func (x *effectCtx) stop() {
	x.mu.Lock()
	x.timer.Stop()
	x.firesAt.Store(0)
	x.cancel(ErrClosed)
	x.spent.Store(true)
	x.mu.Unlock()
}

// expire runs on the timer's goroutine: it ends the running effect if its deadline has
// passed, or re-arms for the deadline of the effect now running. An effect that ended
// just before expire looked costs nothing but a fresh context for the next one.
func (x *effectCtx) expire() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.firesAt.Store(0)
	due := x.due.Load()
	if due == 0 {
		return
	}
	if wait := time.Duration(due) - time.Since(x.base); wait > 0 {
		x.timer.Reset(wait)
		x.firesAt.Store(due)
		return
	}
	x.cancel(ErrEffectTimeout)
	x.spent.Store(true)
}
