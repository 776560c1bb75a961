package machine

import (
	"context"
	"errors"

	"github.com/mcpfsm/mcpfsm/states"
	"github.com/qmuntal/stateless"
)

// One stateless.StateMachine serves every Machine built from a Spec. Its state is kept
// outside it (stateless's external storage), in the core of the machine whose owner
// goroutine is firing, which the context carries; its guards read that core's Vars. It
// fires in immediate mode, so that the owners of different machines never share a
// queue. Stateless decides which transition a trigger takes; the core then runs the
// transition's effects itself, in a fixed order, outside stateless.

// coreKey is the context key under which a firing core is found. It is a pointer so
// that the lookups stateless makes on every Fire compare one word.
var coreKey = new(byte)

func coreFrom(ctx context.Context) *core { return ctx.Value(coreKey).(*core) }

// errUnhandled is what stateless returns for a trigger the current state does not
// handle, or whose guards all fail; the core ignores such an event.
var errUnhandled = errors.New("machine: trigger not handled in this state")

func (l *loader) compile() {
	s := l.spec
	// A context without a core comes from stateless's own tools (ToGraph, String):
	// they see the initial state.
	sm := stateless.NewStateMachineWithExternalStorage(
		func(ctx context.Context) (stateless.State, error) {
			if c, ok := ctx.Value(coreKey).(*core); ok {
				return c.state, nil
			}
			return s.initial, nil
		},
		func(ctx context.Context, st stateless.State) error {
			if c, ok := ctx.Value(coreKey).(*core); ok {
				c.state = st.(sid)
			}
			return nil
		},
		stateless.FiringImmediate)
	sm.OnUnhandledTrigger(func(context.Context, stateless.State, stateless.Trigger, []string) error {
		return errUnhandled
	})
	sm.OnTransitioned(func(ctx context.Context, t stateless.Transition) {
		c := coreFrom(ctx)
		c.took = took{from: t.Source.(sid), to: t.Destination.(sid), trig: t.Trigger.(trig), ok: true}
	})
	for _, ss := range s.states[1:] {
		cfg := sm.Configure(ss.id)
		for _, list := range ss.on {
			for _, e := range list {
				configureEdge(cfg, e)
			}
		}
		for _, e := range ss.after {
			configureEdge(cfg, e)
		}
	}
	s.sm = sm
}

func configureEdge(cfg *stateless.StateConfiguration, e *edge) {
	guards := make([]stateless.GuardFunc, len(e.guards))
	for i, g := range e.guards {
		test, negate := g.test, g.negate
		guards[i] = func(ctx context.Context, _ ...any) bool {
			c := coreFrom(ctx)
			return test(&c.vars, c.pol) != negate
		}
	}
	switch {
	case e.internal:
		t := e.trig
		from := e.from
		cfg.InternalTransition(t, func(ctx context.Context, _ ...any) error {
			coreFrom(ctx).took = took{from: from, to: from, trig: t, internal: true, ok: true}
			return nil
		}, guards...)
	case e.to == e.from:
		cfg.PermitReentry(e.trig, guards...)
	default:
		cfg.Permit(e.trig, e.to, guards...)
	}
}

// Stateless returns a new stateless.StateMachine configured from the spec, in state at
// (the initial state when the spec does not declare at), for comparison with stateless's own tools (its
// ToGraph, or a raw Fire in a benchmark). Fire it with the returned context: its state
// and the Vars and Policies its guards read are kept there. A Machine does not use it:
// machines share one that the spec keeps.
func (s *Spec) Stateless(at states.State, v *Vars, p *Policies) (*stateless.StateMachine, context.Context) {
	id, ok := s.byName[at]
	if !ok {
		id = s.initial
	}
	c := &core{spec: s, state: id, pol: p}
	if v != nil {
		c.vars = *v
	}
	ctx := context.WithValue(context.Background(), coreKey, c)
	l := &loader{spec: &Spec{}}
	*l.spec = *s
	l.compile()
	return l.spec.sm, ctx
}
