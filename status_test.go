package mcpfsm

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var updateStatus = flag.Bool("update-status", false, "rewrite testdata/status.golden.json")

// scripted is a dialer for an in-memory test server that a script can take down: while
// down, dials are refused and the sessions it opened refuse probes and calls, as a
// server whose process died would.
type scripted struct {
	down atomic.Bool
	// fail, if set, is the error of every dial (a config that cannot work).
	fail atomic.Pointer[error]
	// slow is how long a dial takes.
	slow atomic.Int64
}

func refused() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

func (sc *scripted) dial(ctx context.Context, cfg transport.Config, opts transport.Options) (transport.Client, error) {
	if d := time.Duration(sc.slow.Load()); d > 0 {
		time.Sleep(d)
	}
	if e := sc.fail.Load(); e != nil {
		return nil, *e
	}
	if sc.down.Load() {
		return nil, refused()
	}
	cl, err := transport.DialClient(ctx, cfg, opts)
	if err != nil {
		return nil, err
	}
	return &downable{Client: cl, down: &sc.down}, nil
}

// downable is a session whose server a script can take down.
type downable struct {
	transport.Client
	down *atomic.Bool
}

func (d *downable) Probe(ctx context.Context) error {
	if d.down.Load() {
		return refused()
	}
	return d.Client.Probe(ctx)
}

func (d *downable) Request(ctx context.Context, op, name string, f func(ctx context.Context, cs *mcp.ClientSession) error) error {
	if d.down.Load() {
		return refused()
	}
	return d.Client.Request(ctx, op, name, f)
}

func (d *downable) Subscribe(ctx context.Context, uri string) error {
	if d.down.Load() {
		return refused()
	}
	return d.Client.Subscribe(ctx, uri)
}

func (d *downable) Unsubscribe(ctx context.Context, uri string) error {
	if d.down.Load() {
		return refused()
	}
	return d.Client.Unsubscribe(ctx, uri)
}

func (d *downable) CallTool(ctx context.Context, p *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	if d.down.Load() {
		return nil, refused()
	}
	return d.Client.CallTool(ctx, p)
}

// exactPolicies are the defaults without jitter, so that every timed move falls at a
// known instant of the virtual clock.
func exactPolicies() *machine.Policies {
	p := DefaultSpec().Defaults()
	p.KeepaliveJitter, p.BackoffJitter, p.BreakerCooldownJitter = 0, 0, 0
	return &p
}

// TestStatusScriptedOutage: the status against a scripted outage in virtual time.
// Ready, it names the next probe; when that probe finds the server gone, the last
// failure's cause, message and instant, and the next attempt's instant, are those of
// the virtual clock to the millisecond (exactly, in fact); after recovery, a call and
// then a probe each become the last success, at their instants.
func TestStatusScriptedOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		pol := exactPolicies()
		sc := &scripted{}
		c, err := Open(transport.Config{Name: "mem", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}},
			Options{Logger: quietLogger(), Policies: pol, Rand: rand.New(rand.NewPCG(1, 2)), dial: sc.dial})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		until := func(at time.Time) { time.Sleep(at.Sub(time.Now())); synctest.Wait() }
		same := func(what string, got, want time.Time) {
			t.Helper()
			if !got.Equal(want) || got.UnixMilli() != want.UnixMilli() {
				t.Errorf("%s at +%v, want +%v", what, got.Sub(t0), want.Sub(t0))
			}
		}

		synctest.Wait()
		st := c.Status()
		if st.State != states.Ready || st.Calls != machine.Serve || st.Session == nil || st.LastSuccess != nil || st.LastFailure != nil ||
			st.Next == nil || st.Next.What != "after keepalive" || st.Transport != "inmemory" || st.ActionNeeded {
			t.Fatalf("ready: %+v", st)
		}
		same("ready", st.Since, t0)
		// A session's first probe is drawn within the interval (so that connections
		// opened together do not probe in lockstep); the status says when.
		probe := st.Next.At
		if d := probe.Sub(t0); d <= 0 || d > pol.KeepaliveInterval {
			t.Fatalf("first probe at +%v, want within the keepalive interval", d)
		}
		if st.Session.Server.Implementation == nil || st.Session.Server.Implementation.Name == "" || st.Session.InFlight != 0 {
			t.Errorf("session: %+v", st.Session)
		}

		sc.down.Store(true)
		until(probe.Add(500 * time.Millisecond)) // the probe finds the server gone
		st = c.Status()
		if st.State != states.BackingOff || st.Calls != machine.Wait || st.Session != nil || st.Failures != 1 ||
			st.BreakerThreshold != pol.BreakerThreshold || st.ActionNeeded {
			t.Fatalf("after the failure: %+v", st)
		}
		if f := st.LastFailure; f == nil || f.Cause != states.CauseLost || !strings.Contains(f.Message, "connection refused") {
			t.Fatalf("last failure: %+v", f)
		} else {
			same("last failure", f.At, probe)
		}
		if st.Next == nil || st.Next.What != "after backoff" {
			t.Fatalf("next: %+v", st.Next)
		}
		back := probe.Add(pol.BackoffBase)
		same("next attempt", st.Next.At, back)
		same("backing off", st.Since, probe)

		sc.down.Store(false)
		until(back.Add(time.Second)) // the attempt connects
		st = c.Status()
		if st.State != states.Ready || st.LastSuccess != nil || st.Session == nil {
			t.Fatalf("after recovery: %+v", st)
		}
		same("ready again", st.Since, back)
		same("session start", st.Session.Started, back)
		if st.Session.Age != time.Second {
			t.Errorf("session age %v, want 1s", st.Session.Age)
		}
		if st.LastFailure == nil || st.LastFailure.Cause != states.CauseLost {
			t.Errorf("the last failure is forgotten on recovery: %+v", st.LastFailure)
		}

		if _, err := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}); err != nil {
			t.Fatal(err)
		}
		st = c.Status()
		if s := st.LastSuccess; s == nil || s.What != "call" {
			t.Fatalf("last success after a call: %+v", s)
		} else {
			same("last success (call)", s.At, back.Add(time.Second))
		}

		// A probe that the call's answer spares sends nothing; the first that goes
		// out is answered, and becomes the last success at its instant.
		for range 3 {
			st = c.Status()
			if st.Next == nil || st.Next.What != "after keepalive" {
				t.Fatalf("next: %+v", st.Next)
			}
			probe = st.Next.At
			until(probe.Add(time.Millisecond))
			if s := c.Status().LastSuccess; s.What == "probe" {
				same("last success (probe)", s.At, probe)
				break
			}
		}
		st = c.Status()
		if st.LastSuccess.What != "probe" || st.Failures != 0 {
			t.Errorf("after probes: last success %+v, failures %d (want a probe, 0)", st.LastSuccess, st.Failures)
		}
	})
}

// TestStatusNextIsTheStates: while a connect takes its time, the status names no next
// move: the timer the machine still holds is the state's before (the backoff that led
// to the connect), which is no move of the connecting state's.
func TestStatusNextIsTheStates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := &scripted{}
		sc.down.Store(true)
		pol := exactPolicies()
		c, err := Open(transport.Config{Name: "mem", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}},
			Options{Logger: quietLogger(), Policies: pol, dial: sc.dial})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		synctest.Wait()
		st := c.Status()
		if st.State != states.BackingOff || st.Next == nil || st.Next.What != "after backoff" {
			t.Fatalf("after a refused dial: %+v", st)
		}
		sc.down.Store(false)
		sc.slow.Store(int64(5 * time.Second))
		time.Sleep(st.Next.At.Sub(time.Now()) + time.Second)
		synctest.Wait()
		if st := c.Status(); st.State != states.Connecting || st.Next != nil {
			t.Errorf("a second into a slow connect: state %s, next %+v; want connecting, no next move", st.State, st.Next)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if st := c.Status(); st.State != states.Ready || st.Next == nil || st.Next.What != "after keepalive" {
			t.Errorf("after the connect: state %s, next %+v", st.State, st.Next)
		}
	})
}

// TestStatusActionNeeded: a connection parked by a config that cannot work says that a
// person must act, and what to do; one backing off after a lost server does not.
func TestStatusActionNeeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := &scripted{}
		missing := fmt.Errorf("starting the server: %w", &fs.PathError{Op: "fork/exec", Path: "/nonexistent", Err: syscall.ENOENT})
		sc.fail.Store(&missing)
		c, err := Open(transport.Config{Name: "mem", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}},
			Options{Logger: quietLogger(), Policies: exactPolicies(), dial: sc.dial})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		if _, err := c.WaitState(context.Background(), func(s states.State) bool { return s == states.Parked }); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the owner arms the park timer after the transition
		st := c.Status()
		if !st.ActionNeeded || !strings.Contains(st.Action, "config") || st.Calls != machine.FailFast ||
			st.LastFailure == nil || st.LastFailure.Cause != states.CauseConfig || st.Next == nil {
			t.Errorf("parked: %+v", st)
		}
		if got := actionFor(machine.FailFast, &machine.Failure{Cause: states.CauseAuth}); !strings.Contains(got, "credentials") {
			t.Errorf("unauthorized: action %q", got)
		}
		if got := actionFor(machine.FailFast, &machine.Failure{Cause: states.CauseLost}); got != "" {
			t.Errorf("an open breaker needs no action, got %q", got)
		}
		if got := actionFor(machine.Wait, &machine.Failure{Cause: states.CauseConfig}); got != "" {
			t.Errorf("a connection that waits needs no action, got %q", got)
		}
	})
}

// TestStatusJSON: a Status encodes with the field names of the golden file, which
// clients of mcpfsm run --http-status and mcpfsm status --json rely on. Run go test
// -update-status after a deliberate change.
func TestStatusJSON(t *testing.T) {
	at := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	st := Status{
		Server: "files", Transport: "stdio", State: states.Ready, Calls: machine.Serve, Since: at,
		LastSuccess: &Success{At: at.Add(90 * time.Second), What: "probe"},
		LastFailure: &FailureStatus{Cause: states.CauseLost, Message: "mcp server \"files\": EOF", At: at.Add(-time.Minute)},
		Failures:    1, BreakerThreshold: 5,
		Next: &NextMove{What: "after keepalive", At: at.Add(2 * time.Minute)},
		Session: &SessionStatus{
			ID: "s-1", Started: at, Age: 90*time.Second + 1234*time.Microsecond, InFlight: 2,
			Server: ServerInfo{
				Implementation:  &mcp.Implementation{Name: "files", Version: "1.2.3"},
				Capabilities:    &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
				ProtocolVersion: "2025-06-18", SessionID: "s-1", Started: at,
			},
		},
	}
	parked := Status{
		Server: "gone", Transport: "stdio", State: states.Parked, Calls: machine.FailFast, Since: at,
		LastFailure:  &FailureStatus{Cause: states.CauseConfig, Message: "no such file or directory", At: at},
		Next:         &NextMove{What: "after park_interval", At: at.Add(6 * time.Minute)},
		ActionNeeded: true, Action: actionFor(machine.FailFast, &machine.Failure{Cause: states.CauseConfig}),
	}
	got, err := json.MarshalIndent([]Status{st, parked}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	const golden = "testdata/status.golden.json"
	if *updateStatus {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update-status to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("the JSON of a Status changed (-golden +got):\n%s", diff)
	}
	var back []map[string]any
	if err := json.Unmarshal(got, &back); err != nil || len(back) != 2 {
		t.Fatal(err)
	}
	if _, ok := back[1]["session"]; ok || back[1]["actionNeeded"] != true {
		t.Errorf("a parked status: %v", back[1])
	}
}

// TestManagerStatus: a Manager's status lists every server in config order, with its
// name.
func TestManagerStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := &Config{Servers: []ServerConfig{
			{Name: "b", Transport: transport.Config{Name: "b", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}},
			{Name: "a", Transport: transport.Config{Name: "a", Stdio: &transport.Stdio{Command: "/nonexistent/mcp-server"}}},
		}}
		m, err := NewManager(cfg, ManagerOptions{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close(context.Background())
		synctest.Wait()
		sts := m.Status()
		if len(sts) != 2 || sts[0].Server != "b" || sts[1].Server != "a" {
			t.Fatalf("statuses: %+v", sts)
		}
		if sts[0].State != states.Ready || sts[1].State != states.Parked || !sts[1].ActionNeeded || sts[0].ActionNeeded {
			t.Errorf("states: %s %s, action %v", sts[0].State, sts[1].State, sts[1].ActionNeeded)
		}
		if err := m.Close(context.Background()); err != nil || len(m.Status()) != 0 {
			t.Errorf("a closed Manager has statuses: %+v", m.Status())
		}
	})
}

// TestStatusDecodes: a status encodes to JSON and decodes back (the call mode and the
// cause by name), as a client of /status in Go would read it.
func TestStatusDecodes(t *testing.T) {
	in := Status{Server: "s", State: "breaker-open", Calls: machine.FailFast, LastFailure: &FailureStatus{Cause: states.CauseConfig, Message: "m"}}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Status
	if err := json.Unmarshal(data, &out); err != nil || out.Calls != machine.FailFast || out.LastFailure.Cause != states.CauseConfig {
		t.Errorf("decoded %+v, %v from %s", out, err, data)
	}
}

// TestStatusSessionIDTagged: a status shows the first characters of an MCP session
// ID, not the ID, which lets whoever reaches the server send requests in the
// session (a status goes to the live page, mcpfsm status and the gateway's status
// resource); Conn.Server has it whole.
func TestStatusSessionIDTagged(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	c, err := Open(transport.Config{Name: "tagged", HTTP: &transport.HTTP{URL: h.URL()}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx, nil); err != nil {
		t.Fatal(err)
	}
	info, ok := c.Server()
	if !ok || len(info.SessionID) < 16 {
		t.Fatalf("Server: %+v, %v, want a session ID", info, ok)
	}
	st := c.Status()
	if st.Session == nil {
		t.Fatal("no session in the status")
	}
	want := info.SessionID[:8] + "…"
	if st.Session.ID != want || st.Session.Server.SessionID != want {
		t.Errorf("the status shows session %q and %q, want %q", st.Session.ID, st.Session.Server.SessionID, want)
	}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), info.SessionID) {
		t.Errorf("the status's JSON holds the whole session ID:\n%s", data)
	}
}

// TestStatusServerInfoBounded: a server that says megabytes of itself (instructions,
// its implementation's name and icons, experimental capabilities) has a status of a
// few KiB: a status is read again and again (the live page every second, /status,
// the gateway's status resource, which a host's model may read), and it carried all
// of it each time, where the gateway's initialize answer carries 8 KiB of a backend's
// instructions. What a well-behaved server says is shown whole.
func TestStatusServerInfoBounded(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	var icons []mcp.Icon
	for range 1000 {
		icons = append(icons, mcp.Icon{Source: "data:image/png;base64," + strings.Repeat("A", 1000)})
	}
	open := func(impl *mcp.Implementation, opts *mcp.ServerOptions) Status {
		t.Helper()
		srv := mcp.NewServer(impl, opts)
		c, err := Open(transport.Config{Name: "s", InMemory: &transport.InMemory{Server: srv}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		return c.Status()
	}

	st := open(&mcp.Implementation{Name: "n" + big, Title: big, Description: big, Version: big, WebsiteURL: big, Icons: icons},
		&mcp.ServerOptions{Instructions: "i" + big, Capabilities: &mcp.ServerCapabilities{
			Experimental: map[string]any{"huge": big}, Extensions: map[string]any{"io.x/huge": map[string]any{"v": []any{big}}},
			Tools: &mcp.ToolCapabilities{ListChanged: true},
		}})
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 16<<10 {
		t.Errorf("the status of a server that says megabytes of itself is %d bytes", len(data))
	}
	info := st.Session.Server
	if !strings.HasPrefix(info.Instructions, "ix") || !strings.HasSuffix(info.Instructions, "…") ||
		!strings.HasPrefix(info.Implementation.Name, "nx") || len(info.Implementation.Icons) != 0 ||
		info.Capabilities.Experimental != nil || info.Capabilities.Extensions != nil || info.Capabilities.Tools == nil {
		t.Errorf("the server's info, cut: %.300s", data)
	}

	small := &mcp.ServerCapabilities{Experimental: map[string]any{"x": map[string]any{"on": true}}, Extensions: map[string]any{"io.x/y": map[string]any{}}}
	st = open(&mcp.Implementation{Name: "files", Version: "1.2.3", Title: "Files"}, &mcp.ServerOptions{Instructions: "Read files.", Capabilities: small})
	want := ServerInfo{
		Implementation: &mcp.Implementation{Name: "files", Version: "1.2.3", Title: "Files"},
		Capabilities:   small, Instructions: "Read files.",
	}
	got := st.Session.Server
	got.ProtocolVersion, got.Started = "", time.Time{}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a well-behaved server's info (-want +got):\n%s", diff)
	}
}
