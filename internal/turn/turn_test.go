package turn

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestOneHolderPerKey: holders of one key never overlap; other keys do not wait.
func TestOneHolderPerKey(t *testing.T) {
	var turns Turns
	var in, most atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			release, err := turns.Acquire(context.Background(), "a")
			if err != nil {
				t.Error(err)
				return
			}
			n := in.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(100 * time.Microsecond)
			in.Add(-1)
			release()
		})
	}
	release, err := turns.Acquire(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	release()
	wg.Wait()
	if most.Load() != 1 {
		t.Errorf("%d holders of one key at once, want 1", most.Load())
	}
}

// TestAcquireGivesUp: a waiter whose context ends gets its error and no turn; the
// turn is then free for the next.
func TestAcquireGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var turns Turns
		release, err := turns.Acquire(context.Background(), "a")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := turns.Acquire(ctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Acquire of a held key = %v, want the context's error", err)
		}
		release()
		again, err := turns.Acquire(context.Background(), "a")
		if err != nil {
			t.Fatal(err)
		}
		again()
	})
}
