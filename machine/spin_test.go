package machine_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// spinSpec is a small lifecycle whose connecting state handles its outcomes as a test
// says (CONNECTED and FAILED); retrying, another connect, goes to waiting (a timed
// edge back to connecting) unless RETRY says otherwise.
const spinSpec = `version: 1
description: A lifecycle to test loops without a pause.
initial: idle
POLICIES
states:
  idle:
    description: Not started.
    calls: wait
    on:
      start: {to: connecting, description: Started.}
      close: {to: closed, description: Closed.}
  connecting:
    description: Connecting.
    calls: wait
    invoke: {effect: connect, timeout: connect_timeout}
    on:
      connected:
CONNECTED
      connect_failed:
FAILED
      close: {to: closed, description: Closed.}
  retrying:
    description: Connecting again.
    calls: wait
    invoke: {effect: connect, timeout: connect_timeout}
    on:
      connected: {to: ready, description: Up.}
      connect_failed:
RETRY
      close: {to: closed, description: Closed.}
  waiting:
    description: Waiting before the next attempt.
    calls: wait
    after:
      - {delay: backoff, to: connecting, description: Try again.}
    on:
      close: {to: closed, description: Closed.}
  ready:
    description: Up.
    calls: serve
    on:
      lost: {to: waiting, description: Lost.}
      recycle: {to: retrying, description: Again.}
      close: {to: closed, description: Closed.}
  closed:
    description: Closed for good.
    final: true
`

// spinRegistry is the default registry with two guards a custom lifecycle might
// declare: retryable (the last cause counts) and garbage (the last cause is protocol).
func spinRegistry() machine.Registry {
	reg := effects.Registry()
	reg.Guards["retryable"] = machine.Guard{
		Doc:   "The last failure counts.",
		Test:  func(v *machine.Vars, _ *machine.Policies) bool { return v.LastCause.Counts() },
		Books: machine.Books{LastCause: []states.Cause{states.CauseLost, states.CauseTimeout, states.CauseExpired, states.CauseProtocol}},
	}
	reg.Guards["garbage"] = machine.Guard{
		Doc:   "The last failure was a protocol error.",
		Test:  func(v *machine.Vars, _ *machine.Policies) bool { return v.LastCause == states.CauseProtocol },
		Books: machine.Books{LastCause: []states.Cause{states.CauseProtocol}},
	}
	return reg
}

// TestSpinGuarded: checkSpin refuses a loop of outcomes without a pause unless its
// guards end it, by what they declare of the engine's books, whatever the causes the
// outcomes carry; a guard that bounds nothing ("not unfixable") no longer lets it by.
func TestSpinGuarded(t *testing.T) {
	const (
		up      = `        {to: ready, description: Up.}`
		wait    = `        {to: waiting, description: Wait.}`
		unguard = "the machine would go round connecting → connecting (connect_failed) without a pause, as fast as the effects end (a connect refused at once: microseconds): take a timed edge (after) on the way, or guard one of these transitions"
	)
	alts := func(lines ...string) string {
		var b strings.Builder
		for i := 0; i+1 < len(lines); i += 2 {
			b.WriteString("        - {to: " + lines[i] + ", guard: [" + lines[i+1] + "], description: An alternative.}\n")
		}
		return strings.TrimSuffix(b.String(), "\n")
	}
	def := string(defaultSpecYAML(t))
	policies := def[strings.Index(def, "\npolicies:")+1 : strings.Index(def, "\nstates:")]
	for _, tc := range []struct {
		name              string
		connected, failed string
		retry             string
		want              []string // in the one problem; none: the spec loads
		not               []string // not in it
	}{
		{
			name:   "unguarded",
			failed: `        {to: connecting, description: Again at once.}`,
			want:   []string{"spin.yaml:LINE:9: " + unguard},
		},
		{
			name:   "not unfixable bounds nothing",
			failed: alts("waiting", "unfixable", "connecting", "not unfixable"),
			want:   []string{"go round connecting → connecting (connect_failed) without a pause", "cause lost", "cause timeout", "cause protocol", "cause auth", "cause server", "its guards do not end the loop"},
			not:    []string{"cause config", "no cause"},
		},
		{
			// not tripped ends the causes that count; server, auth and config do
			// not count, and the classifier may give artifact, canceled or request.
			name:   "not tripped alone",
			failed: alts("connecting", "not tripped", "waiting", "tripped"),
			want:   []string{"cause server", "cause auth", "cause config", "cause artifact"},
			not:    []string{"cause lost", "cause timeout", "cause protocol", "cause expired"},
		},
		{
			// The default lifecycle's guards on connecting, the backing-off edge made
			// a loop: config and auth go elsewhere, the causes that count trip the
			// breaker, but a connect that fails at once with cause server (or one the
			// classifier calls artifact, canceled or request) counts nothing and
			// would be retried for ever. Refused.
			name: "default guards on a direct loop",
			failed: alts("waiting", "unfixable", "waiting", "not unfixable, unauthorized",
				"connecting", "not unfixable, not unauthorized, not tripped", "waiting", "not unfixable, not unauthorized, tripped"),
			want: []string{"outcomes with cause artifact, cause server, cause canceled or cause request keep coming"},
		},
		{
			name:   "default guards through a timed edge",
			failed: alts("waiting", "unfixable", "waiting", "not unfixable, unauthorized", "waiting", "not unfixable, not unauthorized"),
		},
		{
			name:   "unguarded through a timed edge",
			failed: wait,
		},
		{
			name:   "retryable and not tripped",
			failed: alts("connecting", "retryable, not tripped", "waiting", "retryable, tripped", "waiting", "not retryable"),
		},
		{
			name:   "retryable alone",
			failed: alts("connecting", "retryable", "waiting", "not retryable"),
			want:   []string{"outcomes with cause lost, cause timeout, cause expired or cause protocol keep coming"},
		},
		{
			// An action on the way may reset the failures (healthy does): the
			// breaker's count then bounds nothing.
			name: "retryable and not tripped with an action on the way",
			failed: `        - {to: connecting, guard: [retryable, not tripped], effects: [count_attempt], description: Again.}
        - {to: waiting, guard: [retryable, tripped], description: Wait.}
        - {to: waiting, guard: not retryable, description: Wait.}`,
			want: []string{"an action on the way may reset the books", "cause lost"},
		},
		{
			// Only protocol errors loop, and each one lengthens the streak.
			name:   "garbage and not garbled",
			failed: alts("connecting", "garbage, not garbled", "waiting", "garbage, garbled", "waiting", "not garbage"),
		},
		{
			// A lost connect between two protocol errors starts the streak over.
			name:   "retryable and not garbled",
			failed: alts("connecting", "retryable, not garbled", "waiting", "retryable, garbled", "waiting", "not retryable"),
			want:   []string{"cause lost, cause timeout, cause expired or cause protocol keep coming"},
		},
		{
			name:   "not garbled, not tripped and retryable",
			failed: alts("connecting", "retryable, not garbled, not tripped", "waiting", "retryable, garbled", "waiting", "retryable, not garbled, tripped", "waiting", "not retryable"),
		},
		{
			// A guard that bounds nothing on one edge of a longer loop.
			name:   "two states",
			failed: alts("retrying", "not unfixable", "waiting", "unfixable"),
			retry:  `        {to: connecting, description: Again at once.}`,
			want:   []string{"go round connecting → retrying (connect_failed) → connecting (connect_failed) without a pause", "cause lost"},
		},
		{
			// Round two states, one edge ends the causes that count, the other
			// permits protocol alone, which counts.
			name:   "two states, bounded",
			failed: alts("retrying", "retryable, not tripped", "waiting", "retryable, tripped", "waiting", "not retryable"),
			retry:  alts("connecting", "garbage", "waiting", "not garbage"),
		},
		{
			// An edge taken only once Close is asked for: checkClose judges it.
			name:   "closing",
			failed: alts("connecting", "closing", "waiting", "not closing"),
		},
		{
			// A success between two protocol errors leaves the streak as it was
			// (an event without a cause changes no book): each round lengthens it.
			// The loop was refused, as if a success started the streak over.
			name:      "success between protocol errors, not garbled",
			connected: alts("retrying", "garbage", "ready", "not garbage"),
			failed:    `        {to: waiting, description: Wait.}`,
			retry:     alts("connecting", "garbage, not garbled", "waiting", "garbage, garbled", "waiting", "not garbage"),
		},
		{
			// Successes alone leave the streak short for ever.
			name:      "success loop under not garbled",
			connected: alts("connecting", "garbage, not garbled", "ready", "not garbage", "ready", "garbage, garbled"),
			failed:    `        {to: retrying, description: Another way.}`,
			want:      []string{"go round connecting → connecting (connected) without a pause", "outcomes with no cause (a success) keep coming"},
		},
		{
			name:      "success loop, unguarded",
			connected: `        {to: connecting, description: Again.}`,
			failed:    `        {to: retrying, description: Another way.}`,
			want:      []string{"go round connecting → connecting (connected) without a pause, as fast as the effects end (a connect refused at once: microseconds): take a timed edge"},
		},
		{
			// A success carries no cause: it counts nothing and leaves the last
			// cause as it was, so no guard on the books can end the loop.
			name:      "success loop, guarded",
			connected: alts("connecting", "retryable, not tripped", "ready", "not retryable", "ready", "retryable, tripped"),
			failed:    `        {to: retrying, description: Another way.}`,
			want:      []string{"go round connecting → connecting (connected) without a pause", "outcomes with no cause (a success) keep coming"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			connected, retry := tc.connected, tc.retry
			if connected == "" {
				connected = up
			}
			if retry == "" {
				retry = wait
			}
			data := strings.NewReplacer("POLICIES", policies, "CONNECTED", connected, "FAILED", tc.failed, "RETRY", retry).Replace(spinSpec)
			_, err := machine.LoadSpec("spin.yaml", []byte(data), spinRegistry())
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused:\n%v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("loaded: the loop was not refused")
			}
			got := err.Error()
			if strings.Count(got, "\n") > 0 {
				t.Errorf("more than one problem:\n%s", got)
			}
			for _, w := range tc.want {
				w = strings.Replace(w, "LINE", strconv.Itoa(strings.Count(data[:strings.Index(data, tc.failed)], "\n")+1), 1)
				if !strings.Contains(got, w) {
					t.Errorf("the error does not say %q:\n%s", w, got)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(got, w) {
					t.Errorf("the error says %q:\n%s", w, got)
				}
			}
		})
	}
}
