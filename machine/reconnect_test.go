package machine_test

import (
	"sync"
	"testing"
)

// TestReconnectingSettles: Reconnect numbers itself (asked.Add) and then posts,
// in two steps; two goroutines may post their reconnects in the other order, and the
// owner stores each one's number as applied, so the last stored may be the smaller:
// Reconnecting then reports true with nothing left to apply, until the next
// Reconnect. A call in a fail-fast state (an open breaker) then waits for its context
// to end instead of failing fast (Conn.acquire). Here the machine is idle, which
// ignores recycle, so reconnects are cheap to apply.
func TestReconnectingSettles(t *testing.T) {
	m, _ := newMachine(t, &fakeServer{up: true}, nil)
	defer closeMachine(t, m)
	for round := range 200 {
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 20 {
					m.Reconnect()
				}
			})
		}
		wg.Wait()
		applied(t, m)
		if m.Reconnecting() {
			t.Fatalf("round %d: every reconnect was applied (Sync returned), but Reconnecting reports true", round)
		}
	}
}
