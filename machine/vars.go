package machine

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/mcpfsm/mcpfsm/states"
)

// Vars is a machine's extended state: what its guards read and its actions write,
// beside the state itself. Only the owner touches it.
type Vars struct {
	// Failures counts failures of the connection (causes that count: lost, timeout,
	// expired, protocol) since it was last seen healthy. The engine counts them.
	Failures int
	// Attempts counts passes through backing off since a session last came up. It
	// sets the backoff delay.
	Attempts int
	// Cooldown is the breaker's current cooldown; 0 until the breaker first opens.
	Cooldown time.Duration
	// Planned is set while a teardown that was asked for is under way; such a
	// teardown spends no budget. A failure that counts clears it.
	Planned bool
	// Closing is set by the engine once Close has been asked for; the guard
	// "closing" reads it.
	Closing bool
	// Probed is set once the current session has passed a probe.
	Probed bool
	// SessionStart is when the current session came up.
	SessionStart time.Time
	// LastCause and LastErr are the class and error of the last event that had one.
	// The engine sets them before guards are evaluated.
	LastCause states.Cause
	LastErr   error
	// Streak counts the failures in a row, up to the last, whose cause was
	// LastCause: three protocol errors in a row make a Streak of 3.
	Streak int
	// Heard is how long before the last event the server was last heard from, as
	// the event says (Event.Heard): a probe spared by a recent answer says how
	// recent, so that the next probe is due an interval after that answer.
	Heard time.Duration
}

// A Registry binds the names a spec may use to the code behind them. Package effects
// provides the one the default lifecycle uses.
type Registry struct {
	Guards  map[string]Guard  // by the name a spec's guard: lists use
	Actions map[string]Action // by the name a spec's entry:, exit: and effects: lists use
	Invokes map[string]Invoke // by the name a state's invoke: uses
	Delays  map[string]Delay  // by the name a timed transition's after: uses
}

// A Guard is a named condition on a transition. It must be pure: it reads Vars and
// Policies and changes nothing. A spec may negate it ("not planned"). The guard
// "closing" is the engine's own (Vars.Closing) and needs no entry.
type Guard struct {
	Doc  string                          // one line, for graphs and errors
	Test func(v *Vars, p *Policies) bool // whether the guard holds
	// Books, if set, says how Test follows from the engine's books of failures, so
	// that the validator can prove a loop run without a pause ends by itself (see
	// Books). A guard that declares nothing is taken to bound nothing.
	Books Books
}

// Books declares how a guard's value follows from the books the engine keeps of
// failures (Vars.LastCause, Failures and Streak, which it updates before guards see an
// event), for the validator's check of loops run without a pause. At most one field may
// be set; a declaration must say exactly what Test computes (package effects tests its
// own against Test). A guard that sets more than one is taken to declare nothing.
type Books struct {
	// LastCause: the guard holds exactly when Vars.LastCause is one of these.
	LastCause []states.Cause
	// Tripped: the guard holds exactly when Vars.Failures ≥ breaker_threshold (the
	// failures whose cause counts, one each).
	Tripped bool
	// Streak, if not CauseNone: the guard holds exactly when Vars.LastCause is this
	// cause and Vars.Streak ≥ breaker_threshold (that many failures of it in a row).
	Streak states.Cause
}

// An Action is a named instant effect: bookkeeping on Vars, run on the owner
// as the machine enters or leaves a state or takes a transition. It must not block.
type Action struct {
	Doc string                                    // one line, for graphs and errors
	Do  func(v *Vars, p *Policies, now time.Time) // the bookkeeping
}

// Effects is the value that carries out a machine's invoked effects (Options.Effects,
// SimOptions.World). Which type it must have is its registry's business: each Invoke's
// Run knows it (package effects binds its invokes to the methods of effects.Effects).
type Effects = any

// An Invoke is a named blocking effect that a state runs on entry (connect, probe,
// teardown), under a timeout the spec names. Its result is one of its Outcomes, which
// the state must handle. Run is the code: it carries the effect out on the machine's
// Effects. An Invoke without Run is unbound: a spec that invokes it does not load.
type Invoke struct {
	Doc      string           // one line, for graphs and errors
	Outcomes []states.Trigger // the triggers Run may return, each of which the state must handle
	// Fails lists the outcomes that report a failure: Run returns them only with a
	// cause (Event.Cause is never CauseNone; any other cause may come). The validator
	// relies on it: an outcome not listed may carry no cause, which leaves the books
	// as they were, so no guard on them can end a loop through it.
	Fails []states.Trigger
	Run   func(ctx context.Context, fx Effects, inv Invocation) Event
}

// A Delay is a named delay function for a timed transition, such as the backoff for the
// current attempt. Next returns the delay, or false when the transition is disabled (a
// keepalive interval of 0). Policy, if set, names the policy that sets its scale, for
// graphs.
type Delay struct {
	Doc    string // one line, for graphs and errors
	Policy string
	Next   func(v *Vars, p *Policies, r *rand.Rand) (time.Duration, bool)
}

// closingGuard is the engine's own guard: Close has been asked for.
const closingGuard = "closing"

var engineGuards = map[string]Guard{
	closingGuard: {
		Doc:  "Close was asked for (the engine sets it, whatever the spec's actions say).",
		Test: func(v *Vars, _ *Policies) bool { return v.Closing },
	},
}
