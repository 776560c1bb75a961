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

// TestFinalByItselfClosesTheSession: a spec that reaches its final state by itself,
// not by Close (here a reconnect asked for in ready ends the connection), has the
// session it held closed then, within teardown_timeout, not at a Close that may come
// much later: a stdio server's process lived on, for a Manager's whole life, behind
// a connection whose calls all failed with ErrClosed.
func TestFinalByItselfClosesTheSession(t *testing.T) {
	data, err := os.ReadFile("transitions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(data), "      recycle:\n        to: replacing\n        description: A reconnect was asked for; a new session is opened before this one is closed.",
		"      recycle:\n        to: closed\n        description: A reconnect ends the connection, without a teardown.", 1)
	spec, err := LoadSpec("ends.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan uint64, 4)
	c := open(t, stdioConfig(t, testserver.Options{}), nil, func(o *Options) {
		o.Spec = spec
		o.onClose = func(s *session) { closed <- s.id }
	})
	c.waitState(states.Ready, 20*time.Second)
	c.Reconnect()
	c.waitState(states.Closed, 10*time.Second)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatalf("the session was not closed when the connection ended by itself\n%s", c.timeline())
	}
}
