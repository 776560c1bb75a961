package faults

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

// defaultParallel is how many rows run at once unless -test.parallel says
// otherwise: the rows spend their time waiting, not computing.
const defaultParallel = 4

func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", strconv.Itoa(defaultParallel)); err != nil {
			panic(err)
		}
	}
	goleak.VerifyTestMain(m)
}

// TestMatrix plays every row of the fault matrix, in parallel, and checks the
// whole process before and after. With -update it rewrites the matrix
// section of docs/reliability.md from what this run measured.
func TestMatrix(t *testing.T) {
	testserver.Build(t) // before the baseline: it runs the go command
	all := rows()
	before := measure()
	stalls.start()
	began := time.Now()
	t.Run("rows", func(t *testing.T) {
		for _, w := range all {
			t.Run(w.id(), func(t *testing.T) {
				t.Parallel()
				w.play(t)
			})
		}
	})
	took := time.Since(began)
	if n, worst := stalls.end(); n > 0 {
		t.Logf("the runtime: %d beats of a bystander goroutine came more than %v late, the worst by %v", n, stallMin, worst.Round(time.Millisecond))
	}

	var after baseline
	if !settle(settleLeaks, func() bool {
		after = measure()
		return after.goroutines <= before.goroutines && after.fds <= before.fds && after.children <= before.children
	}) {
		t.Errorf("the process leaked: before the rows %+v, after %+v\nchildren: %v\nfds: %v", before, after, testutil.Children(), testutil.OpenFiles())
	}

	section := renderMatrix(all, took, before, after)
	t.Logf("the matrix:\n%s", section)
	if !*update {
		return
	}
	results.Lock()
	ran := len(results.m)
	results.Unlock()
	if ran != len(all) {
		t.Fatalf("-update publishes a run of the whole matrix: %d of %d rows ran", ran, len(all))
	}
	if err := publish(section); err != nil {
		t.Fatal(err)
	}
}

// TestMatrixPublished checks that docs/reliability.md shows a table from a
// run of the whole matrix as it is now (every row, no other), in which every
// row passed. (The numbers in it are from that run; they change from run to
// run and are not checked here.)
func TestMatrixPublished(t *testing.T) {
	ids, failing, err := publishedRows()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, w := range rows() {
		want = append(want, w.id())
	}
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("the published matrix is not the matrix's rows (-want +published); regenerate it with `go test -race -count=1 ./faults -run TestMatrix -update`:\n%s", diff)
	}
	for _, f := range failing {
		t.Errorf("published as failing: %s", f)
	}
}

// The tunings of the faults.
const (
	downFor      = 500 * time.Millisecond  // a killed HTTP server stays down
	freezeFor    = 1200 * time.Millisecond // longer than detection plus a teardown
	latencyFor   = 1500 * time.Millisecond // many calls, and several probes above the probe timeout
	quietFor     = 2500 * time.Millisecond // several probes below it, with the load paused (two need about 1.2 s; the rest is for a loaded machine)
	latencyBelow = 300 * time.Millisecond  // under tolerantProbe
	latencyAbove = 600 * time.Millisecond  // twice the probe timeout
	// tolerantProbe is the probe timeout of the rows whose fault must be
	// tolerated: with 300ms, a loaded machine answers some probes too late
	// by itself, and a burst's notifications hold the probe's answer up
	// (1000 take about 0.2s to read under the race detector unloaded, over a
	// second loaded).
	tolerantProbe = 2 * time.Second
	resetFor      = 600 * time.Millisecond  // two probe intervals
	statusFor     = time.Second             // a burst of HTTP errors
	toleratedFor  = 1500 * time.Millisecond // watch a tolerable fault this long
	burstSize     = 1000                    // tools/list_changed notifications
)

// rows returns the matrix, fault by fault.
func rows() []*row {
	var all []*row
	kinds := []string{kindStdio, kindHTTP, kindSSE}
	network := []string{kindHTTP, kindSSE}
	add := func(kinds []string, make func(kind string) *row) {
		for _, k := range kinds {
			all = append(all, make(k))
		}
	}
	add(kinds, killRow)
	add(kinds, freezeRow)
	add(kinds, restartRow)
	add(kinds, func(k string) *row { return latencyRow(k, false) })
	add(kinds, func(k string) *row { return latencyRow(k, true) })
	add(network, resetRow)
	for _, code := range []int{500, 502, 503, 429} {
		add(network, func(k string) *row { return statusRow(k, code) })
	}
	add(kinds, hangInitializeRow)
	add(kinds, hangCloseRow)
	add(kinds, refusePingRow)
	add([]string{kindStdio}, func(string) *row { return garbageAtStartRow() })
	add([]string{kindStdio}, func(string) *row { return garbageMidSessionRow() })
	add(kinds, burstRow)
	add([]string{kindStdio}, func(string) *row { return stopReadingRow() })
	for _, b := range breaks {
		add([]string{kindStdio}, func(string) *row { return breakThenDeafRow(b) })
	}
	return all
}

// serve starts the row's server with opts (plus the journal and control
// file): the stdio binary, or the in-process HTTP server behind the proxy.
func (r *run) serve(kind string, opts testserver.Options) transport.Config {
	opts.Journal, opts.Control = r.journal, r.controlFile
	switch kind {
	case kindStdio:
		return r.stdioConfig(opts)
	case kindSSE:
		opts.SSE = true
	}
	r.srv = r.startInproc(opts)
	return r.srv.config(kind)
}

// serveProc starts the row's server as an HTTP subprocess (or the stdio
// binary, for stdio), for faults that kill or restart the server process.
func (r *run) serveProc(kind string, opts testserver.Options) transport.Config {
	opts.Journal, opts.Control = r.journal, r.controlFile
	switch kind {
	case kindStdio:
		return r.stdioConfig(opts)
	case kindSSE:
		opts.SSE = true
	}
	r.proc = r.startProc(opts)
	return r.proc.config(kind)
}

// killRow: the server process is killed with SIGKILL. A stdio server is
// respawned by the connection; an HTTP server is started again by the test
// after downFor, on the same port.
func killRow(kind string) *row {
	var killed int
	return &row{
		fault: "kill", kind: kind,
		setup: func(r *run) transport.Config { return r.serveProc(kind, testserver.Options{}) },
		inject: func(r *run) {
			held := r.inflight(5000)
			if kind == kindStdio {
				killed = r.child()
				r.mark()
				_ = syscall.Kill(killed, syscall.SIGKILL)
				r.end = r.start
				r.mayHaveRun(held)
				return
			}
			r.mark()
			<-r.proc.signal(syscall.SIGKILL)
			r.mayHaveRun(held)
			time.Sleep(downFor)
			r.proc.start()
			r.end = time.Now()
		},
		detect: detectDead(kind),
		sees:   states.CauseLost,
		check: func(r *run) {
			if kind == kindStdio {
				if pid := r.child(); pid == killed {
					r.errorf("the killed child %d still serves", pid)
				}
				r.note("respawned")
			}
		},
	}
}

// detectDead returns the causes with which a dead server or connection may be
// detected: lost; over HTTP also a probe's timeout (a probe sent on a pooled
// connection the peer dropped silently, or a probe a loaded machine did not
// answer in time before anything else noticed).
func detectDead(kind string) []states.Cause {
	if kind == kindStdio {
		return []states.Cause{states.CauseLost}
	}
	return []states.Cause{states.CauseLost, states.CauseTimeout}
}

// freezeRow: the server stops answering without closing anything. stdio:
// SIGSTOP for freezeFor, then SIGCONT if it still exists (the connection has
// killed it by then: a fresh child serves). HTTP: the proxy stops forwarding
// (toxiproxy's timeout toxic, both ways) for freezeFor; its removal closes the
// frozen connections.
func freezeRow(kind string) *row {
	return &row{
		fault: "freeze", kind: kind,
		setup: func(r *run) transport.Config { return r.serve(kind, testserver.Options{}) },
		inject: func(r *run) {
			if kind == kindStdio {
				pid := r.child()
				if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
					r.fatalf("SIGSTOP: %v", err)
				}
				r.mark()
				r.end = r.start // a fresh child is usable at once
				time.Sleep(freezeFor)
				if r.signalChild(pid, syscall.SIGCONT) {
					r.note("the frozen child was still alive at SIGCONT")
				} else {
					r.note("frozen child killed by the forced teardown")
				}
				return
			}
			r.srv.toxic("timeout", `{"timeout":0}`)
			r.mark()
			time.Sleep(freezeFor)
			r.srv.untoxic()
			r.end = time.Now()
		},
		detect: []states.Cause{states.CauseTimeout},
	}
}

// restartRow: the server process exits on SIGTERM and a new one takes its
// place, knowing none of the old sessions. stdio: the connection spawns the
// new one. HTTP: the test starts the new process at once, on the same port.
func restartRow(kind string) *row {
	w := &row{
		fault: "restart", kind: kind,
		setup: func(r *run) transport.Config { return r.serveProc(kind, testserver.Options{}) },
		inject: func(r *run) {
			if kind == kindStdio {
				pid := r.child()
				r.mark()
				_ = syscall.Kill(pid, syscall.SIGTERM)
				r.end = r.start
				return
			}
			r.mark()
			r.proc.signal(syscall.SIGTERM) // it shuts down gracefully, for up to 1s
			r.proc.start()                 // as soon as the port is free
			r.end = time.Now()
		},
		detect: detectDead(kind),
	}
	if kind == kindHTTP {
		// A request with the old session's ID gets 404 (expired); one that
		// races the restart may find nothing listening (lost).
		w.detect = append(w.detect, states.CauseExpired)
	}
	return w
}

// latencyRow: every answer is delayed for latencyFor, by more than the probe
// timeout or by less. HTTP: toxiproxy's latency toxic on what the server
// sends. stdio: the server waits before handling each request (the control
// file).
func latencyRow(kind string, above bool) *row {
	fault, lat := "latency-below", latencyBelow
	if above {
		fault, lat = "latency-above", latencyAbove
	}
	var lifting time.Time // when the latency began to be removed
	// Below the probe timeout, the latency goes on after latencyFor for a watch
	// with the load paused (see run.quiet), from quietFrom to quietTo: under the
	// load the probes send nothing, and they must be seen to reach the server and
	// pass.
	var quietFrom, quietTo time.Time
	var before map[string]int
	w := &row{
		fault: fault, kind: kind,
		setup: func(r *run) transport.Config { return r.serve(kind, testserver.Options{}) },
		inject: func(r *run) {
			if kind == kindStdio {
				r.control(testserver.ControlLatency + "=" + lat.String())
			} else {
				r.srv.latency(lat)
			}
			r.mark()
			time.Sleep(latencyFor)
			if !above {
				before = r.quiet()
				quietFrom = time.Now()
				time.Sleep(quietFor)
				quietTo = time.Now()
			}
			lifting = time.Now() // removing the toxic delivers what it holds at once
			if kind == kindStdio {
				r.control()
			} else {
				r.srv.untoxic()
			}
			r.end = time.Now()
			r.resumeLoad()
		},
	}
	if above {
		w.detect = []states.Cause{states.CauseTimeout}
		return w
	}
	w.policies = tolerant
	w.check = func(r *run) {
		// The latency was there: calls made during it took at least as long.
		r.mu.Lock()
		var fastest time.Duration
		n := 0
		for _, c := range r.calls {
			if c.err == nil && c.start.After(r.start) && c.end.Before(lifting) && c.tool == "echo" {
				if d := c.end.Sub(c.start); n == 0 || d < fastest {
					fastest = d
				}
				n++
			}
		}
		r.mu.Unlock()
		if n == 0 || fastest < lat*9/10 {
			r.errorf("%d echo calls during the latency, the fastest in %v: the latency was not applied", n, fastest)
		}
		// Probes passed under the latency, having reached the server (a ping, or
		// a tools/list for a server that refuses ping).
		probes := r.countBetween(quietFrom, quietTo, states.Probing, states.Ready)
		if probes < 2 {
			r.errorf("%d probes passed during the latency with the load paused, want at least 2\n%s", probes, r.timeline())
		}
		after := r.serverCounts()
		if sent := after["ping"] + after["tools/list"] - before["ping"] - before["tools/list"]; sent < probes {
			r.errorf("%d probes passed during the latency, but the server saw %d pings and tools/list", probes, sent)
		}
		r.note("fastest call %s under the latency; %d probes reached the server under it with the load paused", duration(fastest), probes)
	}
	return w
}

// resetRow: the proxy resets the connections (toxiproxy's reset_peer toxic,
// both ways) for resetFor: a connection is cut as soon as data crosses it,
// with a TCP RST for connections opened meanwhile.
func resetRow(kind string) *row {
	return &row{
		fault: "reset", kind: kind,
		setup: func(r *run) transport.Config { return r.serve(kind, testserver.Options{}) },
		inject: func(r *run) {
			r.srv.toxic("reset_peer", `{"timeout":0}`)
			r.mark()
			time.Sleep(resetFor)
			r.srv.untoxic()
			r.end = time.Now()
		},
		detect: detectDead(kind),
		sees:   states.CauseLost,
	}
}

// statusRow: for statusFor, every POST gets the HTTP status code (no body)
// without reaching the MCP server.
func statusRow(kind string, code int) *row {
	return &row{
		fault: "http-" + strconv.Itoa(code), kind: kind,
		setup: func(r *run) transport.Config { return r.serve(kind, testserver.Options{}) },
		inject: func(r *run) {
			r.srv.h.SetStatus(code)
			r.mark()
			time.Sleep(statusFor)
			r.srv.h.SetStatus(0)
			r.end = time.Now()
		},
		detect: detectDead(kind),
		sees:   states.CauseLost,
	}
}

// hangInitializeRow: the server never answers initialize until the first
// connect has failed; the connection is opened while it hangs.
func hangInitializeRow(kind string) *row {
	return &row{
		fault: "hang-initialize", kind: kind, atStart: true,
		setup: func(r *run) transport.Config {
			r.control(testserver.ControlHangInitialize)
			return r.serve(kind, testserver.Options{})
		},
		inject: untilConnectFailed,
		detect: []states.Cause{states.CauseTimeout},
	}
}

// hangCloseRow: the server never lets a session close (stdio: it ignores
// stdin EOF and SIGTERM; streamable HTTP: DELETE is never answered; SSE has
// no close message to hang on), and the connection is asked to reconnect: the
// replaced session's close is forced at teardown_timeout while the new one serves.
func hangCloseRow(kind string) *row {
	return &row{
		fault: "hang-close", kind: kind, planned: true,
		setup: func(r *run) transport.Config { return r.serve(kind, testserver.Options{HangClose: true}) },
		inject: func(r *run) {
			r.mark()
			r.end = r.start
			r.conn.Reconnect()
		},
		check: func(r *run) {
			r.await("the replaced session closed", 10*time.Second, func() bool { return r.count(states.Retiring, states.Ready) > 0 })
			var began, ended time.Time
			var torn string
			for _, tr := range r.transitions() {
				if tr.At.Before(r.start) {
					continue
				}
				if tr.To == states.Retiring && began.IsZero() {
					began = tr.At
				}
				if tr.From == states.Retiring && !began.IsZero() {
					ended = tr.At
					torn = tr.String()
					break
				}
			}
			if ended.IsZero() {
				r.fatalf("no close of the replaced session\n%s", r.timeline())
			}
			took := ended.Sub(began)
			r.note("close of the replaced session %s", duration(took))
			if kind == kindSSE {
				// SSE has no close message to hang on: the close is not forced.
				if took >= r.pol.TeardownTimeout*9/10 {
					r.errorf("the close of an SSE session took %v, up to the teardown timeout %v: it waited on the server: %s", took, r.pol.TeardownTimeout, torn)
				}
				return
			}
			// Forced at the teardown timeout, not later than forceGrace after.
			if took < r.pol.TeardownTimeout*9/10 || took > r.pol.TeardownTimeout+forceGrace {
				r.errorf("the close of a session whose server never closes it took %v, want the teardown timeout %v: %s", took, r.pol.TeardownTimeout, torn)
			}
		},
	}
}

// refusePingRow: the server answers ping with method-not-found; it is
// watched for toleratedFor, with the load paused so that the probes reach the
// server (see run.quiet).
func refusePingRow(kind string) *row {
	var before map[string]int
	return &row{
		fault: "refuse-ping", kind: kind, policies: tolerant,
		setup: func(r *run) transport.Config { return r.serve(kind, testserver.Options{RefusePing: true}) },
		inject: func(r *run) {
			before = r.quiet()
			r.mark()
			time.Sleep(toleratedFor)
			r.end = time.Now()
			r.resumeLoad()
		},
		check: func(r *run) {
			after := r.serverCounts()
			// The probes of the watch: later ones may have found a call of the
			// row's end answered, and sent nothing.
			probes := r.countBetween(r.start, r.end, states.Probing, states.Ready)
			if probes < 3 {
				r.errorf("%d probes passed, want at least 3\n%s", probes, r.timeline())
			}
			// The probe falls back to tools/list and stays there: the first probe
			// that reached the server sent the one ping of the session (before the
			// watch or in it: under the load, probes send nothing), and every probe
			// of the watch listed tools.
			if pings := after["ping"]; pings != 1 {
				r.errorf("%d pings reached the server, want the first probe's alone (during the watch: %d)", pings, pings-before["ping"])
			}
			if lists := after["tools/list"] - before["tools/list"]; lists < probes {
				r.errorf("%d probes passed but the server saw %d tools/list", probes, lists)
			}
			r.note("%d probes by tools/list; pings received in all: %d", probes, after["ping"])
		},
	}
}

// tolerant gives a row whose fault must be tolerated a roomier probe timeout.
func tolerant(p *machine.Policies) { p.ProbeTimeout = tolerantProbe }

// serverCounts returns what the row's server has received, by method.
func (r *run) serverCounts() map[string]int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := r.conn.CallTool(ctx, &mcp.CallToolParams{Name: "stats"})
	if err != nil {
		r.fatalf("stats: %v", err)
	}
	counts, err := testserver.Stats(res)
	if err != nil {
		r.fatalf("stats: %v", err)
	}
	return counts
}

// garbageAtStartRow: every server spawned writes a line of garbage to stdout
// before anything else, until the first connect has failed.
func garbageAtStartRow() *row {
	return &row{
		fault: "garbage-at-start", kind: kindStdio, atStart: true,
		setup: func(r *run) transport.Config {
			r.control(testserver.ControlGarbage)
			return r.serve(kindStdio, testserver.Options{})
		},
		inject: untilConnectFailed,
		detect: []states.Cause{states.CauseLost, states.CauseProtocol},
	}
}

// garbageMidSessionRow: the server writes a line of garbage to stdout in the
// middle of a session (SIGUSR1 makes it).
func garbageMidSessionRow() *row {
	return &row{
		fault: "garbage-mid-session", kind: kindStdio,
		setup: func(r *run) transport.Config {
			return r.serve(kindStdio, testserver.Options{GarbageOnSignal: true})
		},
		inject: func(r *run) {
			pid := r.child()
			held := r.inflight(5000)
			r.mark()
			_ = syscall.Kill(pid, syscall.SIGUSR1)
			r.end = r.start
			r.mayHaveRun(held)
		},
		detect: []states.Cause{states.CauseLost, states.CauseProtocol},
	}
}

// burstRow: the server sends burstSize tools/list_changed notifications in a
// row (and its tool list changes once).
func burstRow(kind string) *row {
	var before map[string]int
	return &row{
		fault: "list-changed-burst", kind: kind, policies: tolerant,
		setup: func(r *run) transport.Config { return r.serve(kind, testserver.Options{BurstTool: true}) },
		inject: func(r *run) {
			before = r.serverCounts()
			r.mark()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := r.conn.CallTool(ctx, &mcp.CallToolParams{Name: "tools_changed_burst", Arguments: map[string]any{"n": burstSize}})
			// The server's last send returns once the client has read all but
			// what the stream buffers.
			r.note("sent in %s", duration(time.Since(r.start)))
			if err != nil || text(res) != strconv.Itoa(burstSize) {
				r.fatalf("tools_changed_burst = %q, %v; want %d sent\n%s", text(res), err, burstSize, r.timeline())
			}
			r.await("the new tool list", 10*time.Second, func() bool {
				return slices.ContainsFunc(r.conn.Listed().Tools, func(t *mcp.Tool) bool { return t.Name == "extra" })
			})
			time.Sleep(300 * time.Millisecond) // re-lists still running end
			r.end = time.Now()
		},
		check: func(r *run) {
			// The re-lists are the tools/list the server saw (a probe of this
			// server pings; under the load it sends nothing at all).
			relists := r.serverCounts()["tools/list"] - before["tools/list"]
			if relists < 1 || relists > burstSize/10 {
				r.errorf("%d notifications cost %d re-lists; want them coalesced", burstSize, relists)
			}
			// ToolsChanged sees a list only when it differs from the one it saw
			// last: the list changed once, so once, with the new tool.
			r.mu.Lock()
			var delivered []toolSet
			for _, set := range r.toolSets {
				if set.at.After(r.start) {
					delivered = append(delivered, set)
				}
			}
			r.mu.Unlock()
			if len(delivered) != 1 || !slices.Contains(delivered[0].names, "extra") {
				r.errorf("ToolsChanged was given %v after the burst; want the changed list, once", delivered)
			}
			r.note("%d notifications, %d re-lists", burstSize, relists)
		},
	}
}

// untilConnectFailed is the fault of a row whose server misbehaves from the start: the
// fault lasts from the opening until the first connect has failed.
func untilConnectFailed(r *run) {
	r.start = r.opened
	r.await("a failed connect", r.pol.ConnectTimeout+10*time.Second, func() bool {
		return r.count(states.Connecting, states.BackingOff)+r.count(states.Connecting, states.BreakerOpen) > 0
	})
	r.control()
	r.end = time.Now()
}

// The tunings of the rows of issue 17's items 1 and 2.
const (
	bigArg         = 1 << 20     // the argument that fills a stopped server's stdin pipe
	bigCallTimeout = time.Second // the deadline of the call that writes it
	// bigCallSlack is how late the call may return: less than lateSlack, as
	// a write the transport does not interrupt ends only when the stopped
	// child is killed, at detection + teardown timeout (1.3s + 0.5s).
	bigCallSlack = 500 * time.Millisecond
	// stoppedProbe is the probe timeout of the stop-reading row, as in the
	// issue: longer than the call's deadline, so that it is the call's
	// deadline that must end the write, not the probe's failure.
	stoppedProbe = time.Second
	pipeFull     = 64 << 10 // Linux's default pipe capacity
)

// stopReadingRow (issue 17, item 1): the server stops reading its stdin
// (SIGSTOP) and a call with a 1 MiB argument, under a 1s deadline, fills the
// pipe: the write blocks, and a probe queues behind it. The call returns by its
// deadline, the probe by its timeout, and the connection kills the stopped
// child and spawns a new one. Before Close the fault strikes again (the new
// child stopped, a 1 MiB call blocked in its write): Close keeps its bound, the
// call its deadline, and the stopped child does not outlive the connection.
func stopReadingRow() *row {
	var stopped int
	var big *call
	return &row{
		fault: "stop-reading", kind: kindStdio,
		setup: func(r *run) transport.Config { return r.serve(kindStdio, testserver.Options{}) },
		inject: func(r *run) {
			stopped = r.child()
			r.stop(stopped)
			r.mark()
			r.end = r.start // a fresh child is usable at once
			var wrote <-chan struct{}
			big, wrote = r.bigCall("big")
			r.awaitPipeFull(stopped, wrote)
		},
		// The probe queued behind the write times out; or the write, broken
		// by the call's deadline, ends the session.
		detect:   []states.Cause{states.CauseTimeout, states.CauseLost},
		policies: func(p *machine.Policies) { p.ProbeTimeout = stoppedProbe },
		check: func(r *run) {
			if late := big.end.Sub(big.deadline); late > bigCallSlack {
				r.errorf("the 1 MiB call returned %v after its deadline, want at most %v: %v", late, bigCallSlack, big.err)
			}
			r.awaitGone(stopped, "the stopped child")
			r.note("1 MiB call returned after %s (deadline %s): %s", duration(big.end.Sub(big.start)), duration(bigCallTimeout), outcome(big))
		},
		beforeClose: func(r *run) {
			pid := r.child()
			r.stop(pid)
			c, done := r.bigCall("big-at-close")
			r.awaitPipeFull(pid, done)
			r.afterClose = append(r.afterClose, func() {
				r.awaitCall(c, done)
				r.note("with the server stopped and a 1 MiB write blocked: Close %s, the call %s (%s)",
					duration(r.closeTook), duration(c.end.Sub(c.start)), outcome(c))
			})
		},
	}
}

// A streamBreak is a way for a stdio server to break its stream (issue 17,
// item 2), made by a signal.
type streamBreak struct {
	fault string
	sig   syscall.Signal
	opts  testserver.Options
	args  []string // switches of mcptestserver alone
}

// breaks are the ways of item 2, each by a server that then ignores stdin EOF
// (and SIGTERM: only SIGKILL ends it).
var breaks = []streamBreak{
	{"garbage-then-deaf", syscall.SIGUSR1, testserver.Options{GarbageOnSignal: true, HangClose: true}, nil},
	{"close-stdout-then-deaf", syscall.SIGUSR2, testserver.Options{HangClose: true}, []string{"-on-usr2", "close-stdout"}},
	{"oversize-line-then-deaf", syscall.SIGUSR2, testserver.Options{HangClose: true}, []string{"-on-usr2", "oversize"}},
}

// breakDetect returns the causes with which a break may be detected: lost or
// protocol; for the over-size line also a probe's timeout, as the client reads
// 16 MiB before it fails the line (seconds under the race detector on a loaded
// machine) and a probe whose answer waits behind it times out first. The
// second break, with no probe, checks that the end itself is reported.
func breakDetect(b streamBreak) []states.Cause {
	if b.fault == "oversize-line-then-deaf" {
		return []states.Cause{states.CauseLost, states.CauseProtocol, states.CauseTimeout}
	}
	return []states.Cause{states.CauseLost, states.CauseProtocol}
}

// breakReported bounds how long after the second break its end may be
// reported: reading a 16 MiB line under the race detector takes seconds on a
// loaded machine.
const breakReported = 20 * time.Second

// breakThenDeafRow (issue 17, item 2): the server breaks its stream (a line
// that is not JSON, its stdout closed, a line over the SDK's limit) with a
// call in flight, and ignores stdin EOF and SIGTERM from then on. The end is
// detected at once, the call in flight fails saying it may have run, the child
// is killed (not waited for), and a new one serves. Before Close the fault
// strikes again, and Close comes as soon as the connection has seen it.
func breakThenDeafRow(b streamBreak) *row {
	var broken int
	return &row{
		fault: b.fault, kind: kindStdio,
		setup: func(r *run) transport.Config { return r.stdioConfigWith(b.opts, b.args...) },
		inject: func(r *run) {
			broken = r.child()
			held := r.inflight(5000)
			r.mark()
			_ = syscall.Kill(broken, b.sig)
			r.end = r.start
			r.mayHaveRun(held)
			r.note("the call in flight failed %s after the break", duration(time.Since(r.start)))
		},
		detect: breakDetect(b),
		check: func(r *run) {
			r.awaitGone(broken, "the child that broke its stream")
			// With calls in flight, a call may report the break before the
			// session's end does: the teardown is then our own close of a deaf
			// server, which waits for it until forced (see the second break).
			took, _ := r.stay(states.TearingDown)
			r.note("the broken session's teardown %s", duration(took))
		},
		beforeClose: func(r *run) {
			// With the load stopped and probes put off, only the session's end
			// can report the break: a close that is not ours, which must not
			// wait on the deaf server. The end is reported, and the child
			// killed within endGrace (250ms, for a closed stdout), not at the
			// teardown timeout. Then Close, at once.
			r.noProbes()
			pid := r.child()
			struck := time.Now()
			_ = syscall.Kill(pid, b.sig)
			r.await("the second break reported", breakReported, func() bool { return r.failedSince(struck) })
			det := r.firstFailureSince(struck)
			gone := settle(r.pol.TeardownTimeout*9/10-time.Since(det.At), func() bool { return !r.alive(pid) })
			r.note("second break, with no call or probe: reported after %s, the child killed after %s",
				duration(det.At.Sub(struck)), duration(time.Since(struck)))
			var te *transport.Error
			switch {
			case !errors.As(det.Err, &te) || te.Op != transport.OpEnd:
				r.errorf("the second break was not reported by the session's end: %v\n%s", det, r.timeline())
			case !gone:
				r.errorf("the deaf child was still alive %v after the end was reported: the end waited on it\n%s", r.pol.TeardownTimeout*9/10, r.timeline())
			}
			r.afterClose = append(r.afterClose, func() {
				r.note("Close %s", duration(r.closeTook))
			})
		},
	}
}

// stop stops a child (SIGSTOP) and waits until it is stopped.
func (r *run) stop(pid int) {
	r.t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		r.fatalf("SIGSTOP: %v", err)
	}
	r.await("the child stopped", 5*time.Second, func() bool {
		return slices.ContainsFunc(marked(r.marker), func(p testutil.Proc) bool { return p.PID == pid && p.State == "T" })
	})
}

// awaitGone waits until the row's child pid is dead (reaped, or a zombie
// about to be), failing the row if it lives on.
func (r *run) awaitGone(pid int, what string) {
	r.t.Helper()
	r.await(what+" killed", 5*time.Second, func() bool { return !r.alive(pid) })
}

// stay returns how long the connection stayed in st the first time it entered
// it from the fault's start on, and the transition that left it.
func (r *run) stay(st states.State) (time.Duration, machine.Transition) {
	var in time.Time
	for _, tr := range r.transitions() {
		switch {
		case tr.At.Before(r.start):
		case in.IsZero() && tr.To == st:
			in = tr.At
		case !in.IsZero() && tr.From == st && tr.To != st:
			return tr.At.Sub(in), tr
		}
	}
	r.fatalf("the connection did not pass through %s after the fault\n%s", st, r.timeline())
	return 0, machine.Transition{}
}

// noProbes puts the connection's probes off for an hour, and returns once no
// probe armed before is still due: the connection has applied the change and
// stayed ready for longer than the old keepalive interval (a timer armed with
// it would have fired).
func (r *run) noProbes() {
	r.t.Helper()
	quiet := *r.pol
	quiet.KeepaliveInterval = time.Hour
	if err := r.conn.SetPolicies(quiet); err != nil {
		r.fatalf("SetPolicies: %v", err)
	}
	r.await("the policies applied", 5*time.Second, func() bool { return r.conn.Policies().KeepaliveInterval == time.Hour })
	r.await("no probe due", 5*time.Second, func() bool {
		trs := r.transitions()
		last := trs[len(trs)-1]
		return last.To == states.Ready && time.Since(last.At) > r.pol.KeepaliveInterval+probeDueSlack
	})
}

// probeDueSlack: how late a probe's timer may be seen to fire on a loaded
// machine.
const probeDueSlack = 200 * time.Millisecond

// firstFailureSince returns the first transition from t on whose cause is a
// failure.
func (r *run) firstFailureSince(t time.Time) machine.Transition {
	for _, tr := range r.transitions() {
		if !tr.At.Before(t) && failure(tr.Cause) {
			return tr
		}
	}
	r.fatalf("no failure since %v\n%s", t, r.timeline())
	return machine.Transition{}
}

// alive reports whether pid is a live child of the row (not a zombie).
func (r *run) alive(pid int) bool {
	return slices.ContainsFunc(marked(r.marker), func(p testutil.Proc) bool { return p.PID == pid && p.State != "Z" })
}

// failedSince reports whether the connection recorded a failure from t on.
func (r *run) failedSince(t time.Time) bool {
	return slices.ContainsFunc(r.transitions(), func(tr machine.Transition) bool { return !tr.At.Before(t) && failure(tr.Cause) })
}

// bigCall starts an echo of bigArg bytes under bigCallTimeout, and returns it
// and a channel closed once it has returned. While the load runs, the call is
// one of its calls (stopLoad waits for it, checkCalls and checkLost check it,
// the table counts it); after, its caller checks it (awaitCall).
func (r *run) bigCall(name string) (*call, <-chan struct{}) {
	c := &call{tool: "echo", id: r.id + "#" + name, start: time.Now()}
	c.deadline = c.start.Add(bigCallTimeout)
	c.want = c.id + strings.Repeat("x", bigArg)
	load := r.loadRunning()
	if load {
		r.begin(c)
	}
	done := make(chan struct{})
	r.loadWG.Add(1)
	go func() {
		defer r.loadWG.Done()
		defer close(done)
		c.do(r.conn, map[string]any{"text": c.want})
		if load {
			r.done(c)
		}
	}()
	return c, done
}

// awaitCall waits for a call bigCall started, and checks that it returned by
// its deadline with its answer or a *mcpfsm.CallError.
func (r *run) awaitCall(c *call, done <-chan struct{}) {
	r.t.Helper()
	select {
	case <-done:
	case <-time.After(time.Until(c.deadline) + lateSlack + 5*time.Second):
		r.errorf("call %s has not returned %v after its deadline", c.id, time.Since(c.deadline))
		return
	}
	r.checkLate(c, bigCallSlack)
	var ce *mcpfsm.CallError
	switch {
	case c.err != nil && !errors.As(c.err, &ce):
		r.errorf("call %s: an error that is not a *mcpfsm.CallError: %T %v", c.id, c.err, c.err)
	case c.err == nil && c.text != c.want:
		r.errorf("call %s answered %.100q", c.id, c.text)
	}
}

// awaitPipeFull waits until the 1 MiB write has begun filling the stopped
// child's stdin pipe (half its capacity: messages queued before it take a
// slot of the pipe's each, so it may not fill to the byte): as the pipe holds
// a small part of the write, the write is blocked. It fails the row if the
// call returns first or the pipe does not fill within the call's deadline.
func (r *run) awaitPipeFull(pid int, returned <-chan struct{}) {
	r.t.Helper()
	deadline := time.Now().Add(bigCallTimeout)
	for {
		n, err := pipeQueued(pid)
		if err != nil {
			r.fatalf("reading the child's stdin pipe: %v", err)
		}
		if n >= pipeFull/2 {
			return
		}
		select {
		case <-returned:
			r.fatalf("the 1 MiB call returned before the stopped child's pipe filled (%d bytes)", n)
		default:
		}
		if time.Now().After(deadline) {
			r.fatalf("the stopped child's stdin pipe holds %d bytes after %v, want %d: no write is blocked", n, bigCallTimeout, pipeFull/2)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pipeQueued returns how many bytes wait in a child's stdin pipe, through a
// descriptor of that pipe of our own (opened by /proc, closed at once).
func pipeQueued(pid int) (int, error) {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/0", pid), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int32
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	}); err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// outcome says in a few words how a call ended.
func outcome(c *call) string {
	var ce *mcpfsm.CallError
	switch {
	case c.err == nil:
		return "answered"
	case errors.As(c.err, &ce):
		return ce.Cause.String()
	default:
		return "untyped error"
	}
}
