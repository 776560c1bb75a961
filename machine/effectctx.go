package machine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrEffectTimeout is the cause (context.Cause) of an invoked effect's context when the
// effect outlived its timeout policy. It matches context.DeadlineExceeded.
var ErrEffectTimeout = fmt.Errorf("effect timed out: %w", context.DeadlineExceeded)

// ErrClosed is the cause of an invoked effect's context when Close interrupted it, and
// the error of operations on a machine that has closed.
var ErrClosed = errors.New("machine closed")

// effectCtx gives invoked effects a context that ends at their timeout, or when Close
// interrupts them. One context serves a machine's effects one after another until it is
// spent (it timed out or was canceled), so that running an effect does not allocate; its
// deadline is one timer per machine, re-armed only when an earlier deadline is needed
// and stopped when the owner goes idle. The context has no Deadline: effects see only
// that it is done, and context.Cause says why.
type effectCtx struct {
	mu      sync.Mutex
	ctx     context.Context
	cancel  context.CancelCauseFunc
	due     time.Time // deadline of the running effect; zero when none runs
	firesAt time.Time // when timer fires; zero when stopped
	timer   *time.Timer
}

func (x *effectCtx) init() {
	x.ctx, x.cancel = context.WithCancelCause(context.Background())
	x.timer = time.AfterFunc(time.Hour, x.expire)
	x.timer.Stop()
}

// begin returns the context for an effect that must end by due.
func (x *effectCtx) begin(now, due time.Time) context.Context {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ctx.Err() != nil {
		x.ctx, x.cancel = context.WithCancelCause(context.Background())
	}
	x.due = due
	if x.firesAt.IsZero() || x.firesAt.After(due) {
		x.timer.Reset(due.Sub(now))
		x.firesAt = due
	}
	return x.ctx
}

// end marks the running effect finished. The timer stays armed until idle.
func (x *effectCtx) end() {
	x.mu.Lock()
	x.due = time.Time{}
	x.mu.Unlock()
}

// idle stops the timer while no effect runs, so an idle machine wakes for nothing.
func (x *effectCtx) idle() {
	x.mu.Lock()
	if x.due.IsZero() && !x.firesAt.IsZero() {
		x.timer.Stop()
		x.firesAt = time.Time{}
	}
	x.mu.Unlock()
}

// interrupt cancels the running effect, if any, with cause.
func (x *effectCtx) interrupt(cause error) {
	x.mu.Lock()
	if !x.due.IsZero() {
		x.cancel(cause)
	}
	x.mu.Unlock()
}

// stop releases the timer; the machine is done.
func (x *effectCtx) stop() {
	x.mu.Lock()
	x.timer.Stop()
	x.firesAt = time.Time{}
	x.cancel(ErrClosed)
	x.mu.Unlock()
}

// expire runs on the timer's goroutine: it ends the running effect if its deadline has
// passed, or re-arms for the deadline of the effect now running.
func (x *effectCtx) expire() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.firesAt = time.Time{}
	if x.due.IsZero() {
		return
	}
	if wait := time.Until(x.due); wait > 0 {
		x.timer.Reset(wait)
		x.firesAt = x.due
		return
	}
	x.cancel(ErrEffectTimeout)
}
