package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("run", "[--json] [--history] [--http-status ADDR] CONFIG", `
Connect to every server of a servers config and keep the connections healthy,
printing each transition as it happens: time, server, from → to, trigger, and the
cause of a failure with its error. With --json, print one JSON object per line
instead (the format mcpfsm graph --trace reads): for each server first a line of
kind "server" with the policies it runs with (again when a reload changes them),
then one line per transition.

On SIGHUP the config is read again and adopted without a restart: servers whose
transport or lifecycle changed are reconnected, servers whose policies alone
changed adopt them and keep their session, removed ones are closed, new ones
opened. On Ctrl-C (SIGINT) or SIGTERM every connection is closed and a summary
is printed; with --history, each server's recent transitions too.

With --http-status ADDR (such as 127.0.0.1:8080, or :0 for a free port on
loopback), it also serves, at http://ADDR/, a page that shows every server on its
lifecycle picture (current state, recent path, last success and failure, next
move), updated live; /status, the same as JSON; and /metrics, the connections'
OpenTelemetry metrics as Prometheus text. It listens on loopback only unless
--http-status-remote is given: the page is not authenticated.

Log records (log/slog, text) go to stderr at warning level and above, but for
the failures, which the transition lines already show.

The connections never wait for stdout's reader: a transition line that finds 256
lines waiting to be read is dropped, and the count said once they move; when the
reader is gone (mcpfsm run ... | head), the run ends as on Ctrl-C.`, stderr)
	asJSON := fs.Bool("json", false, "print transitions as JSON lines")
	history := fs.Bool("history", false, "print each server's history at exit")
	var sf statusFlags
	sf.add(fs)
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "mcpfsm run: want exactly one CONFIG")
		return 2
	}
	// From here to the end: SIGHUP reloads, and a write to a stdout whose reader is
	// gone (mcpfsm run ... | head) fails, which ends the run as Ctrl-C does.
	hup, stopSignals := catchHangupAndPipe()
	defer stopSignals()
	path := fs.Arg(0)
	cfg, err := mcpfsm.LoadConfig(path)
	if err != nil {
		fmt.Fprintln(stderr, errorText(err))
		return 1
	}
	web, err := newStatusServer(&sf)
	if err != nil {
		fmt.Fprintln(stderr, "mcpfsm run:", errorText(err))
		return 2
	}
	// The transitions are written by the connections' owners, which must not wait
	// for a reader: stdout goes through a queue (a line that finds it full is dropped,
	// and the count said once it moves again).
	out := &eventPrinter{json: *asJSON, stats: map[string]*serverStats{}, policies: map[string]machine.Policies{}}
	qw := newQueuedWriter(stdout, func(n int) []byte { return out.noteLine(fmt.Sprintf("%d lines dropped: stdout was not read", n)) })
	defer qw.close(5 * time.Second)
	out.w, out.owners = qw.waiting(5*time.Second), qw
	// Before any transition, so that a reader of the JSON lines (graph --trace) knows
	// the policies a server's transitions ran under.
	out.servers(cfg)
	mopts := mcpfsm.ManagerOptions{
		Observer: out.transition,
		Logger:   slog.New(withoutFailures{slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})}),
		History:  256,
	}
	if web != nil {
		mopts.MeterProvider = web.MeterProvider()
	}
	m, err := mcpfsm.NewManager(cfg, mopts)
	if err != nil {
		if web != nil {
			_ = web.Close(context.Background())
		}
		fmt.Fprintln(stderr, "mcpfsm run:", errorText(err))
		return 1
	}
	out.note(fmt.Sprintf("running %s from %s; Ctrl-C to stop, SIGHUP to reload", count(len(cfg.Servers), "server"), printable(path, maxLine)))
	if web != nil {
		web.Serve(m)
		out.note("status page at " + web.URL())
	}

	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-qw.gone:
			done = true // stdout's reader is gone: nobody hears of the connections
		case <-hup:
			next, err := mcpfsm.LoadConfig(path)
			if err != nil {
				out.note("reload failed, keeping the running config:\n" + errorText(err))
				continue
			}
			out.servers(next)
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second) // Ctrl-C cuts a reload short
			res, err := m.Reload(rctx, next)
			cancel()
			msg := "reloaded: " + res.String()
			if err != nil {
				msg += "\nreload errors: " + errorText(err)
			}
			out.note(msg)
		}
	}
	// The connections are taken before Close, which forgets them, and their histories
	// read after it, so that they end with the close.
	conns := map[string]*mcpfsm.Conn{}
	for _, name := range m.Servers() {
		if c := m.Conn(name); c != nil {
			conns[name] = c
		}
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = m.Close(cctx)
	if web != nil {
		// Its own 5 s, as serve gives it: requests still in flight then are cut.
		wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = errors.Join(err, web.Close(wctx))
		cancel()
	}
	var histories map[string][]machine.Transition
	if *history {
		histories = map[string][]machine.Transition{}
		for name, c := range conns {
			histories[name] = c.History()
		}
	}
	out.summary(histories)
	if err != nil {
		fmt.Fprintln(stderr, "mcpfsm run:", errorText(err))
		return 1
	}
	return 0
}

// serverLine is the first JSON line of each server in mcpfsm run --json and simulate
// --json: the policies its transitions run under, written as in a lifecycle. A reload
// that changes them prints another. mcpfsm graph --trace labels the picture with them.
type serverLine struct {
	Time     time.Time         `json:"time"`
	Kind     string            `json:"kind"` // "server"
	Server   string            `json:"server"`
	Policies map[string]string `json:"policies"`
}

func newServerLine(at time.Time, server string, p machine.Policies) serverLine {
	line := serverLine{Time: at, Kind: "server", Server: server, Policies: map[string]string{}}
	for _, info := range machine.AllPolicies() {
		line.Policies[info.Name] = p.Format(info)
	}
	return line
}

// effectivePolicies are the policies a server of a config runs with (as the Manager
// gives them: the spec's defaults when the config leaves them zero, as one built in
// Go may).
func effectivePolicies(s mcpfsm.ServerConfig) machine.Policies {
	switch {
	case s.Policies != (machine.Policies{}):
		return s.Policies
	case s.Spec != nil:
		return s.Spec.Defaults()
	}
	return mcpfsm.DefaultSpec().Defaults()
}

// event is a transition as mcpfsm run --json and simulate --json print it, one JSON
// object per line; mcpfsm graph --trace reads it back.
type event struct {
	Time     time.Time `json:"time"`
	Server   string    `json:"server"`
	From     string    `json:"from"`
	To       string    `json:"to"`
	Trigger  string    `json:"trigger"`
	Cause    string    `json:"cause,omitempty"`
	Error    string    `json:"error,omitempty"`
	Failures int       `json:"failures"`
	Attempts int       `json:"attempts"`
}

func toEvent(server string, tr machine.Transition) event {
	ev := event{Time: tr.At, Server: server, From: tr.From.String(), To: tr.To.String(), Trigger: tr.Trigger, Failures: tr.Failures, Attempts: tr.Attempts}
	if tr.Cause != states.CauseNone {
		ev.Cause = tr.Cause.String()
	}
	if tr.Err != nil {
		ev.Error = tr.Err.Error()
	}
	return ev
}

// eventPrinter prints transitions as they come, from every server's owner.
type eventPrinter struct {
	mu       sync.Mutex
	w        io.Writer // for the command's own lines, which may wait for the reader
	owners   io.Writer // for the transitions, which never wait (nil: w)
	json     bool
	stats    map[string]*serverStats
	policies map[string]machine.Policies // as last printed, by server
}

// servers prints, in JSON mode, a server line for each server of cfg that is new or
// whose policies changed since its last one.
func (p *eventPrinter) servers(cfg *mcpfsm.Config) {
	// Written once the lock is let go, in one write: a write may wait for the
	// reader, and the connections' owners take the lock to report transitions.
	var b bytes.Buffer
	defer func() { p.flush(b.Bytes()) }()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.json {
		return
	}
	now := time.Now()
	for _, s := range cfg.Servers {
		pol := effectivePolicies(s)
		if old, ok := p.policies[s.Name]; ok && old == pol {
			continue
		}
		p.policies[s.Name] = pol
		line, _ := json.Marshal(newServerLine(now, s.Name, pol))
		fmt.Fprintf(&b, "%s\n", line)
	}
}

type serverStats struct {
	last        machine.Transition
	transitions int
	failures    int
	timeIn      map[states.State]time.Duration
}

func (p *eventPrinter) transition(server string, tr machine.Transition) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats[server]
	if st == nil {
		st = &serverStats{timeIn: map[states.State]time.Duration{}}
		p.stats[server] = st
	}
	if st.transitions > 0 {
		st.timeIn[st.last.To] += tr.At.Sub(st.last.At)
	}
	st.last = tr
	st.transitions++
	if tr.Cause.Counts() {
		st.failures++
	}
	w := p.owners
	if w == nil {
		w = p.w
	}
	if p.json {
		line, _ := json.Marshal(toEvent(server, tr))
		fmt.Fprintf(w, "%s\n", line)
		return
	}
	fmt.Fprintf(w, "%s  %s\n", tr.At.Format("15:04:05.000"), formatTransition(server, tr))
}

// formatTransition renders a transition for people: server, from → to, trigger, and
// the cause with its error, made printable (a server's text may hold anything).
func formatTransition(server string, tr machine.Transition) string {
	line := fmt.Sprintf("%-14s %-12s → %-12s  %s", server, tr.From, tr.To, tr.Trigger)
	if tr.Cause != states.CauseNone {
		line += " (" + tr.Cause.String()
		if tr.Err != nil {
			line += ": " + printable(tr.Err.Error(), maxLine)
		}
		line += ")"
	}
	return line
}

// note prints a line of the command's own, whose outside text the caller has made
// printable; in JSON mode it goes out as an object with no server.
func (p *eventPrinter) note(msg string) {
	p.flush(p.noteLine(msg))
}

// flush writes the command's own lines, b, to w.
func (p *eventPrinter) flush(b []byte) {
	if len(b) > 0 {
		_, _ = p.w.Write(b)
	}
}

// noteLine is the line note prints.
func (p *eventPrinter) noteLine(msg string) []byte {
	if p.json {
		line, _ := json.Marshal(map[string]string{"time": time.Now().Format(time.RFC3339Nano), "note": msg})
		return append(line, '\n')
	}
	return fmt.Appendf(nil, "%s  %s\n", time.Now().Format("15:04:05.000"), msg)
}

func (p *eventPrinter) summary(histories map[string][]machine.Transition) {
	// Written once the lock is let go, in one write: a write may wait for the
	// reader, and the connections' owners take the lock to report transitions.
	var b bytes.Buffer
	defer func() { p.flush(b.Bytes()) }()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		for _, name := range sortedNames(p.stats) {
			st := p.stats[name]
			line, _ := json.Marshal(map[string]any{"summary": name, "state": st.last.To.String(), "transitions": st.transitions, "failures": st.failures})
			fmt.Fprintf(&b, "%s\n", line)
			for _, tr := range histories[name] {
				line, _ := json.Marshal(map[string]any{"history": toEvent(name, tr)})
				fmt.Fprintf(&b, "%s\n", line)
			}
		}
		return
	}
	fmt.Fprintf(&b, "\nSummary\n")
	for _, name := range sortedNames(p.stats) {
		st := p.stats[name]
		var parts []string
		for _, s := range sortedStates(st.timeIn) {
			if d := st.timeIn[s]; d > 0 {
				parts = append(parts, fmt.Sprintf("%s %s", s, d.Round(time.Millisecond)))
			}
		}
		fmt.Fprintf(&b, "  %-14s %s after %s, %s; time in %s\n", name, st.last.To, count(st.transitions, "transition"), count(st.failures, "failure"), strings.Join(parts, ", "))
	}
	for _, name := range sortedNames(p.stats) {
		if trs := histories[name]; len(trs) > 0 {
			fmt.Fprintf(&b, "\nHistory of %s\n", name)
			for _, tr := range trs {
				fmt.Fprintf(&b, "  %s  %s\n", tr.At.Format("15:04:05.000"), formatTransition(name, tr))
			}
		}
	}
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// sortedStates returns the states of a time-in map, by name.
func sortedStates(m map[states.State]time.Duration) []states.State {
	out := make([]states.State, 0, len(m))
	for s := range m {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// catchHangupAndPipe catches, until stop, the two signals whose default action would
// kill a long-running command while its connections open or close: SIGHUP, which
// it reads from hup (a reload), and SIGPIPE, so that a write to an output whose
// reader is gone fails with EPIPE, which the command handles. Notify, not Ignore:
// an ignored signal stays ignored in the servers the command starts.
func catchHangupAndPipe() (hup <-chan os.Signal, stop func()) {
	pipe, h := make(chan os.Signal, 1), make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	signal.Notify(h, syscall.SIGHUP)
	return h, func() { signal.Stop(pipe); signal.Stop(h) }
}
