package simulate

import (
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// A Result is what a simulation did.
type Result struct {
	Scenario    Scenario             // what was played
	Spec        *machine.Spec        // the lifecycle it was played against
	Start       time.Time            // the simulation's first instant (virtual time)
	Transitions []machine.Transition // every transition the connection took, in order
	Summary     Summary              // the figures drawn from them
}

// A Summary is a simulation's figures.
type Summary struct {
	Duration        time.Duration // the scenario's length
	Transitions     int           // transitions taken
	ConnectAttempts int           // connects begun (entries into a state that invokes connect)
	AttemptsPerHour []int         // connects begun in each hour of simulated time
	Failures        int           // transitions whose cause counts (lost, timeout, expired, protocol)
	// Detect is, for each fault (down, frozen, restart) that found a session up and
	// cost it, how long until the connection tore that session down.
	Detect []time.Duration
	// Recover is, for each fault that cost the connection its session, how long from
	// the server being back (the end of the fault; a restart is back at once) until
	// the connection was ready again.
	Recover []time.Duration
	Calls   CallStats                      // what became of the scenario's calls
	TimeIn  map[states.State]time.Duration // time spent in each state
	// Stopped, if not zero, is when the simulation stopped short of its duration,
	// having taken MaxTransitions transitions; the figures cover up to then.
	Stopped time.Duration `json:",omitempty"`
}

// MaxTransitions is the most transitions a simulation takes (about 200 MB of them):
// a spec whose timers fire every millisecond would otherwise fill memory within hours
// of simulated time.
const MaxTransitions = 1000000

// Run plays sc against spec with the given policies (the spec's defaults when nil) and
// seed, in virtual time.
func Run(spec *machine.Spec, pol *machine.Policies, sc Scenario, seed uint64) Result {
	sc.defaults()
	w := NewWorld(spec, sc)
	sim := machine.NewSim(spec, machine.SimOptions{World: w, Policies: pol, Rand: rand.New(rand.NewPCG(seed, seed)), MaxTransitions: MaxTransitions})
	start := sim.Now()
	sim.Post(machine.Event{Trigger: states.Start})
	sim.RunUntil(start.Add(sc.Duration))
	trs := sim.Transitions()
	covered := sc
	if sim.Stopped() {
		covered.Duration = max(sim.Now().Sub(start), 1)
	}
	s := Summarize(spec, covered, start, trs, w.Calls())
	if sim.Stopped() {
		s.Stopped = covered.Duration
	}
	return Result{Scenario: sc, Spec: spec, Start: start, Transitions: trs, Summary: s}
}

// Summarize computes a Summary from a scenario's transitions through spec's states:
// what each state means for calls, and which states connect, are the spec's to say.
func Summarize(spec *machine.Spec, sc Scenario, start time.Time, trs []machine.Transition, calls CallStats) Summary {
	s := Summary{Duration: sc.Duration, Transitions: len(trs), Calls: calls, TimeIn: map[states.State]time.Duration{}}
	end := start.Add(sc.Duration)
	s.AttemptsPerHour = make([]int, int((sc.Duration+time.Hour-1)/time.Hour))
	for i, tr := range trs {
		if info, _ := spec.State(tr.To); info.Invoke == "connect" && tr.From != tr.To {
			s.ConnectAttempts++
			if h := int(tr.At.Sub(start) / time.Hour); h < len(s.AttemptsPerHour) {
				s.AttemptsPerHour[h]++
			}
		}
		if tr.Cause.Counts() {
			s.Failures++
		}
		until := end
		if i+1 < len(trs) {
			until = trs[i+1].At
		}
		s.TimeIn[tr.To] += until.Sub(tr.At)
	}
	if len(trs) > 0 {
		s.TimeIn[trs[0].From] += trs[0].At.Sub(start)
	}
	// Detection and recovery, fault by fault: a fault lasts from a change to down,
	// frozen or restart until the next change.
	serves := func(st states.State) bool { return spec.Calls(st) == machine.Serve }
	// The transitions are in time order: an instant is found by binary search, and the
	// first transition of a kind from any index on is tabled once, so that a timeline of
	// 100,000 changes over a million transitions is summarized at once (it took
	// minutes, scanning the transitions for every change).
	n := len(trs)
	index := func(t time.Time) int { return sort.Search(n, func(i int) bool { return !trs[i].At.Before(t) }) }
	before := func(t time.Time) states.State { // the state just before t
		if i := index(t); i > 0 {
			return trs[i-1].To
		}
		return spec.Initial()
	}
	table := func(ok func(machine.Transition) bool) []int { // the first index from i on whose transition is ok
		next := make([]int, n+1)
		next[n] = n
		for i := n - 1; i >= 0; i-- {
			next[i] = next[i+1]
			if ok(trs[i]) {
				next[i] = i
			}
		}
		return next
	}
	firstAfter := func(t, until time.Time, next []int) (machine.Transition, bool) {
		if i := next[index(t)]; i < n && (until.IsZero() || trs[i].At.Before(until)) {
			return trs[i], true
		}
		return machine.Transition{}, false
	}
	lostSession := table(func(tr machine.Transition) bool { return serves(tr.From) && !serves(tr.To) })
	ready := table(func(tr machine.Transition) bool { return serves(tr.To) })
	for i, c := range sc.Timeline {
		if c.Condition == Up {
			continue
		}
		at := start.Add(c.At)
		var until time.Time // when the fault ends: the next change
		if i+1 < len(sc.Timeline) {
			until = start.Add(sc.Timeline[i+1].At)
		}
		hadSession := serves(before(at))
		lost, found := firstAfter(at, until, lostSession)
		if found && hadSession {
			s.Detect = append(s.Detect, lost.At.Sub(at))
		}
		switch {
		case c.Condition == Restart && found:
			// Back at once: recovery runs from the restart to the next session.
			if tr, ok := firstAfter(lost.At, time.Time{}, ready); ok {
				s.Recover = append(s.Recover, tr.At.Sub(at))
			}
		case c.Condition != Restart && !until.IsZero() && (found || !hadSession):
			// Back at the fault's end: recovery runs from then.
			if tr, ok := firstAfter(until, time.Time{}, ready); ok {
				s.Recover = append(s.Recover, tr.At.Sub(until))
			}
		}
	}
	return s
}

// WriteTimeline writes one line per transition, with its time since the start.
func (r Result) WriteTimeline(w io.Writer) {
	for _, tr := range r.Transitions {
		line := fmt.Sprintf("%10s  %-12s → %-12s  %s", fmtDur(tr.At.Sub(r.Start)), tr.From, tr.To, tr.Trigger)
		if tr.Cause != states.CauseNone {
			line += " (" + tr.Cause.String() + ")"
		}
		fmt.Fprintln(w, line)
	}
}

// WriteSummary writes the summary as aligned lines.
func (r Result) WriteSummary(w io.Writer) {
	s := r.Summary
	fmt.Fprintf(w, "scenario:           %s\n", r.Scenario)
	if s.Stopped > 0 {
		fmt.Fprintf(w, "stopped:            at %s, after %d transitions (the most a simulation takes): the figures below cover up to then\n", fmtDur(s.Stopped), s.Transitions)
	}
	fmt.Fprintf(w, "transitions:        %d, of which %d carried a failure that counts\n", s.Transitions, s.Failures)
	fmt.Fprintf(w, "connect attempts:   %d (per hour: %s)\n", s.ConnectAttempts, ints(s.AttemptsPerHour))
	fmt.Fprintf(w, "time to detect:     %s\n", durs(s.Detect))
	fmt.Fprintf(w, "time to recover:    %s\n", durs(s.Recover))
	fmt.Fprintf(w, "calls:              %d made, %d answered, %d failed fast, %d failed\n", s.Calls.Made, s.Calls.Answered, s.Calls.FailedFast, s.Calls.Failed)
	var parts []string
	for _, info := range r.Spec.States() {
		if d := s.TimeIn[info.Name]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s %s (%.1f%%)", info.Name, fmtDur(d), 100*float64(d)/float64(s.Duration)))
		}
	}
	fmt.Fprintf(w, "time per state:     %s\n", strings.Join(parts, ", "))
}

func ints(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, " ")
}

func durs(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	sorted := append([]time.Duration(nil), ds...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmtDur(d)
	}
	return fmt.Sprintf("%s (median %s, max %s)", strings.Join(parts, " "), fmtDur(sorted[len(sorted)/2]), fmtDur(sorted[len(sorted)-1]))
}

// fmtDur rounds a duration for reading: milliseconds under a minute, seconds above.
func fmtDur(d time.Duration) string {
	if d >= time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}
