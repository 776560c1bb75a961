package machine_test

import (
	"context"

	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
)

// invoker is how this package's fakes carry out effects: one function that switches on
// the effect's name.
type invoker interface {
	Invoke(ctx context.Context, inv machine.Invocation) machine.Event
}

// asEffects binds a fake's Invoke to effects.Effects, whose methods the default
// registry binds the spec's invoked effects to. A replacement is a connect, to the
// fakes.
type asEffects struct{ f invoker }

var _ effects.Effects = asEffects{}

func (a asEffects) Connect(ctx context.Context, inv machine.Invocation) machine.Event {
	return a.f.Invoke(ctx, inv)
}

func (a asEffects) Replace(ctx context.Context, inv machine.Invocation) machine.Event {
	inv.Effect = "connect"
	return a.f.Invoke(ctx, inv)
}

func (a asEffects) Probe(ctx context.Context, inv machine.Invocation) machine.Event {
	return a.f.Invoke(ctx, inv)
}

func (a asEffects) Teardown(ctx context.Context, inv machine.Invocation) machine.Event {
	return a.f.Invoke(ctx, inv)
}

func (a asEffects) Retire(ctx context.Context, inv machine.Invocation) machine.Event {
	return a.f.Invoke(ctx, inv)
}
