package gateway

import (
	"testing"
	"time"
)

// TestRecent: a key is kept a minute after it was last added, and forgetting
// touches only the keys that are old.
func TestRecent(t *testing.T) {
	var r recent
	t0 := time.Unix(1000, 0)
	r.add("a", t0)
	r.add("b", t0.Add(30*time.Second))
	r.add("a", t0.Add(50*time.Second)) // again: its first add must not forget it
	r.add("c", t0.Add(61*time.Second))
	if !r.has("a") || !r.has("b") || !r.has("c") {
		t.Fatalf("at 61 s: a %v b %v c %v, want all kept", r.has("a"), r.has("b"), r.has("c"))
	}
	r.add("d", t0.Add(100*time.Second))
	if r.has("b") || !r.has("a") || !r.has("c") || !r.has("d") {
		t.Errorf("at 100 s: a %v b %v c %v d %v, want b alone forgotten", r.has("a"), r.has("b"), r.has("c"), r.has("d"))
	}
	r.add("e", t0.Add(200*time.Second))
	if len(r.at) != 1 || len(r.order) != 1 {
		t.Errorf("at 200 s: %d keys, %d in order, want 1 and 1", len(r.at), len(r.order))
	}
}
