package machine_test

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// TestDelayFloor (issue 17, item 15): a delay function that says 0 cannot make the
// machine spin: every timed transition waits at least MinDelay. Here keepalive says
// 0 and probes answer at once; in a virtual second a healthy connection probes at
// most once per MinDelay.
func TestDelayFloor(t *testing.T) {
	reg := effects.Registry()
	keepalive := reg.Delays["keepalive"]
	keepalive.Next = func(*machine.Vars, *machine.Policies, *rand.Rand) (time.Duration, bool) { return 0, true }
	reg.Delays["keepalive"] = keepalive
	spec, err := machine.LoadSpec("transitions.yaml", defaultSpecYAML(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		var probes atomic.Int64
		spinning := make(chan struct{})
		m := machine.New(spec, machine.Options{Name: t.Name(), Effects: asEffects{instant{}}, Logger: quiet,
			Observer: func(tr machine.Transition) {
				if tr.To == states.Probing && probes.Add(1) == 100_000 {
					close(spinning) // far past one per MinDelay: the floor is gone
				}
			}})
		m.Start()
		select {
		case <-time.After(time.Second):
		case <-spinning:
			t.Fatal("the machine probes without waiting")
		}
		t.Logf("%d probes in a virtual second", probes.Load())
		if n, most := probes.Load(), int64(time.Second/machine.MinDelay); n == 0 || n > most {
			t.Errorf("%d probes in a virtual second, want between 1 and %d", n, most)
		}
		closeMachine(t, m)
	})
}

// instant is a server whose effects take no time: connects and probes succeed.
type instant struct{}

func (instant) Invoke(_ context.Context, inv machine.Invocation) machine.Event {
	switch inv.Effect {
	case "connect":
		return machine.Event{Trigger: states.Connected, Session: 1}
	case "probe":
		return machine.Event{Trigger: states.ProbeOK}
	case "retire":
		return machine.Event{Trigger: states.Retired}
	}
	return machine.Event{Trigger: states.TornDown}
}
