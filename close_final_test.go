package mcpfsm

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
)

// TestCloseStraightToFinal: a spec whose close leads from a state that holds a session
// straight to its final state (no teardown on the way, which the validator allows)
// still has the session closed by the time Close returns; it was left open (a stdio
// server's process alive, an HTTP session never ended) for ever.
func TestCloseStraightToFinal(t *testing.T) {
	data, err := os.ReadFile("transitions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(data), "      close:\n        to: tearing-down\n        description: Closed while ready.", "      close:\n        to: closed\n        description: Closed while ready, without a teardown.", 1)
	spec, err := LoadSpec("straight.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var closed []uint64
	c := open(t, stdioConfig(t, testserver.Options{}), nil, func(o *Options) {
		o.Spec = spec
		o.onClose = func(s *session) { mu.Lock(); closed = append(closed, s.id); mu.Unlock() }
	})
	c.waitState(states.Ready, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(closed) != 1 {
		t.Errorf("sessions closed by Close's return: %v, want the one open\n%s", closed, c.timeline())
	}
}
