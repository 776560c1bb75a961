package machine_test

import (
	"bytes"
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// TestCloseAppliedInTheStateCloseLeadsTo: checkClose proves termination on the
// graph of close edges, as if close were applied again in the state a close edge leads
// to. The engine does not: closeDue compares closeSeq with core.seq, and applyClose
// sets closeSeq after its own transition, so close is never applied in the state close
// itself entered. A spec whose close leads to a state that invokes nothing (here
// ready's close goes to parked, whose own close goes to closed: the validator accepts
// it) leaves the machine resting there, closing, until some timer moves it: Close
// wedges for park_interval (6 minutes), or for ever in a state with no timer.
func TestCloseAppliedInTheStateCloseLeadsTo(t *testing.T) {
	old := []byte("      close:\n        to: tearing-down\n        description: Closed while ready.")
	data := defaultSpecYAML(t)
	if !bytes.Contains(data, old) {
		t.Fatal("transitions.yaml changed: ready's close edge not found")
	}
	data = bytes.Replace(data, old, []byte("      close:\n        to: parked\n        description: Closed while ready."), 1)
	spec, err := machine.LoadSpec("close-to-parked.yaml", data, effects.Registry())
	if err != nil {
		t.Fatalf("the validator rejects the spec (then it is not this bug): %v", err)
	}
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{start: time.Now()}
		m := machine.New(spec, machine.Options{Name: t.Name(), Effects: asEffects{&fakeServer{up: true}}, Logger: quiet, Observer: rec.observe})
		m.Start()
		waitState(t, m, states.Ready, time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		start := time.Now()
		if err := m.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if took, bound := time.Since(start), spec.Defaults().TeardownTimeout+time.Second; took > bound {
			t.Errorf("Close took %s, more than %s:\n%s", took, bound, rec.timeline())
		}
	})
}

// TestCloseGuardedByClosingIsHandled: the engine applies close only with the
// guard "closing" true (applyClose sets it first), so a close edge guarded by closing
// handles close. The validator checks close's coverage over every value of every
// guard, closing false included, and rejects such a spec ("does not handle close when
// not closing"): a valid spec refused.
func TestCloseGuardedByClosingIsHandled(t *testing.T) {
	old := []byte("      close:\n        to: closed\n        description: Closed while parked.")
	data := defaultSpecYAML(t)
	if !bytes.Contains(data, old) {
		t.Fatal("transitions.yaml changed: parked's close edge not found")
	}
	data = bytes.Replace(data, old, []byte("      close:\n        to: closed\n        guard: closing\n        description: Closed while parked."), 1)
	if _, err := machine.LoadSpec("closing-guard.yaml", data, effects.Registry()); err != nil {
		t.Errorf("a close edge guarded by closing is refused:\n%v", err)
	}
}
