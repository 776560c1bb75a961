package turn

import (
	"context"
	"sync"
)

// Turns holds the turns of a set of keys. The zero value is ready to use.
type Turns struct {
	mu   sync.Mutex
	busy map[string]chan struct{} // closed when the turn is released
}

// Acquire waits until no one holds the turn of key, or ctx ends, and returns the
// release of its turn, which must be called once.
func (t *Turns) Acquire(ctx context.Context, key string) (release func(), err error) {
	t.mu.Lock()
	for {
		ch, ok := t.busy[key]
		if !ok {
			break
		}
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		t.mu.Lock()
	}
	if t.busy == nil {
		t.busy = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	t.busy[key] = ch
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		delete(t.busy, key)
		t.mu.Unlock()
		close(ch)
	}, nil
}
