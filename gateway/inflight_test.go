package gateway

import (
	"testing"
	"time"
)

// TestExpiring: an entry is kept ttl after it was last put, at most max of them,
// and forgetting touches only the entries that are old.
func TestExpiring(t *testing.T) {
	e := expiring[string, int]{ttl: time.Minute, max: 3}
	t0 := time.Unix(1000, 0)
	has := func(k string, now time.Time) bool { _, ok := e.get(k, now); return ok }
	e.put("a", 1, t0)
	e.put("b", 2, t0.Add(30*time.Second))
	e.put("a", 3, t0.Add(50*time.Second)) // again: its first put must not forget it
	e.put("c", 4, t0.Add(61*time.Second))
	at := t0.Add(61 * time.Second)
	if !has("a", at) || !has("b", at) || !has("c", at) {
		t.Fatalf("at 61 s: a %v b %v c %v, want all kept", has("a", at), has("b", at), has("c", at))
	}
	if v, _ := e.get("a", at); v != 3 {
		t.Errorf("a = %d, want the last put, 3", v)
	}
	at = t0.Add(100 * time.Second)
	e.put("d", 5, at)
	if has("b", at) || !has("a", at) || !has("c", at) || !has("d", at) {
		t.Errorf("at 100 s: a %v b %v c %v d %v, want b alone forgotten", has("a", at), has("b", at), has("c", at), has("d", at))
	}
	// Past max, the oldest goes first, expired or not.
	e.put("e", 6, at)
	if has("a", at) || !has("c", at) || !has("d", at) || !has("e", at) || e.len() != 3 {
		t.Errorf("four put at a max of 3: a %v c %v d %v e %v, %d kept; want a forgotten", has("a", at), has("c", at), has("d", at), has("e", at), e.len())
	}
	if v, ok := e.take("d", at); !ok || v != 5 || has("d", at) {
		t.Errorf("take d = %d %v, then kept %v; want 5, then gone", v, ok, has("d", at))
	}
	// Taken entries leave no trace that grows: many puts and takes keep order short.
	for i := range 10000 {
		k := string(rune('A' + i%50))
		e.put(k, i, at)
		e.take(k, at)
	}
	if len(e.order) > 2*e.len()+64+1 {
		t.Errorf("after 10,000 puts and takes, %d in order for %d kept", len(e.order), e.len())
	}
	at = t0.Add(200 * time.Second)
	e.put("z", 0, at)
	if e.len() != 1 || len(e.order) != 1 {
		t.Errorf("at 200 s: %d kept, %d in order, want 1 and 1", e.len(), len(e.order))
	}
}

// TestParkedAfterCloseAll: a call that parks as the gateway closes (after closeAll)
// is parked, not a panic on a map closeAll dropped; it is given up at the next
// closeAll or its timeout as any other.
func TestParkedAfterCloseAll(t *testing.T) {
	var ps parked
	park := func() (*parking, *bool) {
		cancelled := false
		return &parking{fc: &frontCall{server: "s"}, what: "tools/call \"x\"", cancel: func() { cancelled = true }}, &cancelled
	}
	p1, c1 := park()
	ps.put(p1)
	ps.closeAll()
	if !*c1 {
		t.Error("closeAll did not give up the parked call")
	}
	p2, c2 := park()
	ps.put(p2) // panicked: assignment to entry in nil map
	ps.closeAll()
	if !*c2 {
		t.Error("the call parked after the first closeAll was not given up by the second")
	}
}
