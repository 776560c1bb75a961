package faults

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/rs/zerolog"
)

// The servers of the matrix. A row's servers are named after its marker, so
// that its children can be found; each is stopped by the row before its leak
// checks.

// stdioConfig returns the config of a stdio server: the test server binary,
// spawned anew by each connect.
func (r *run) stdioConfig(opts testserver.Options) transport.Config {
	opts.Name = r.marker
	return transport.Config{Name: r.id, Stdio: &transport.Stdio{Command: testserver.Build(r.t), Args: testserver.Args(opts)}}
}

// stdioConfigWith is stdioConfig with switches of mcptestserver alone (see
// its package comment) before opts' own.
func (r *run) stdioConfigWith(opts testserver.Options, switches ...string) transport.Config {
	opts.Journal, opts.Control = r.journal, r.controlFile
	cfg := r.stdioConfig(opts)
	cfg.Stdio.Args = append(slices.Clone(switches), cfg.Stdio.Args...)
	return cfg
}

// child returns the row's live stdio child, failing the row if there is not
// exactly one.
func (r *run) child() int {
	r.t.Helper()
	var live []int
	for _, p := range marked(r.marker) {
		if p.State != "Z" {
			live = append(live, p.PID)
		}
	}
	if len(live) != 1 {
		r.fatalf("want one live child process, have %v", live)
	}
	return live[0]
}

// signalChild sends sig to pid if it is still the row's child (a pid is
// never signalled after it was reaped and could have been reused).
func (r *run) signalChild(pid int, sig syscall.Signal) bool {
	for _, p := range marked(r.marker) {
		if p.PID == pid && p.State != "Z" {
			return syscall.Kill(pid, sig) == nil
		}
	}
	return false
}

// A procServer is the test server binary serving HTTP (streamable or SSE) as a
// real subprocess, on an address that stays the same across restarts.
type procServer struct {
	r    *run
	args []string
	addr string

	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{} // closed once cmd is reaped and its stdout drained
	older []*exec.Cmd   // processes started before cmd
	dones []chan struct{}
}

// startProc starts the binary with opts on a free port.
func (r *run) startProc(opts testserver.Options) *procServer {
	opts.Name = r.marker
	p := &procServer{r: r, args: testserver.Args(opts), addr: "127.0.0.1:0"}
	p.start()
	r.ports = append(r.ports, p.port())
	r.onStop(p.kill)
	return p
}

func (p *procServer) port() int {
	_, port, _ := net.SplitHostPort(p.addr)
	n, _ := strconv.Atoi(port)
	return n
}

// config returns the client config for the server.
func (p *procServer) config(kind string) transport.Config {
	h := &transport.HTTP{URL: "http://" + p.addr + "/mcp"}
	if kind == kindSSE {
		return transport.Config{Name: p.r.id, SSE: h}
	}
	return transport.Config{Name: p.r.id, HTTP: h}
}

// start starts the server on p.addr, retrying while the port is still taken
// by the previous process (for up to 5s), and returns once it listens.
func (p *procServer) start() {
	p.r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := p.try()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			p.r.fatalf("starting the HTTP server on %s: %v", p.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *procServer) try() error {
	args := append([]string{"-http", p.addr}, p.args...)
	cmd := exec.Command(testserver.Build(p.r.t), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	lines := bufio.NewReader(stdout)
	url, readErr := lines.ReadString('\n')
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(io.Discard, lines) // until the process exits
		_ = cmd.Wait()
	}()
	if readErr != nil {
		<-done // it exited without listening: the port is taken
		return fmt.Errorf("the server exited: %v", cmd.ProcessState)
	}
	addr := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(url), "http://"), "/mcp")
	p.mu.Lock()
	if p.cmd != nil {
		p.older = append(p.older, p.cmd)
	}
	p.cmd, p.done, p.addr = cmd, done, addr
	p.dones = append(p.dones, done)
	p.mu.Unlock()
	return nil
}

// signal sends sig to the running process and returns a channel closed once
// it has exited and been reaped.
func (p *procServer) signal(sig syscall.Signal) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	_ = p.cmd.Process.Signal(sig) // a process not yet reaped cannot have a reused pid
	return p.done
}

// kill kills the server, and any earlier one still exiting, and waits for
// them to be reaped.
func (p *procServer) kill() {
	p.mu.Lock()
	cmds := append(p.older, p.cmd)
	dones := p.dones
	p.mu.Unlock()
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		select {
		case <-dones[i]: // reaped: its pid may have been reused
		default:
			_ = cmd.Process.Kill()
		}
	}
	for _, d := range dones {
		<-d
	}
}

// An inproc server is the test server's HTTP harness in this process, behind
// an embedded toxiproxy proxy for network faults.
type inproc struct {
	r      *run
	h      *testserver.HTTPServer
	px     *toxiproxy.Proxy
	faults []string // the toxics added, guards first
}

// startInproc starts the harness with opts and a proxy in front of it.
func (r *run) startInproc(opts testserver.Options) *inproc {
	opts.Name = r.marker
	h := testserver.StartHTTP(r.t, opts)
	upstream := strings.TrimSuffix(strings.TrimPrefix(h.URL(), "http://"), "/mcp")
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	px := toxiproxy.NewProxy(srv, r.id, "127.0.0.1:0", upstream)
	if err := px.Start(); err != nil {
		r.fatalf("starting toxiproxy: %v", err)
	}
	s := &inproc{r: r, h: h, px: px}
	r.ports = append(r.ports, portOf(upstream), portOf(px.Listen))
	r.onStop(px.Stop)
	// Every link passes a guard first, which never blocks for good (see
	// guardToxic).
	for _, stream := range []string{"upstream", "downstream"} {
		s.add("guard_"+stream, "guard", stream, fmt.Sprintf(`{"latency":0,"row":%q}`, r.id))
	}
	return s
}

// add adds a toxic.
func (s *inproc) add(name, typ, stream, attrs string) {
	s.r.t.Helper()
	js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"attributes":%s}`, name, typ, stream, attrs)
	if _, err := s.px.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		s.r.fatalf("adding toxic %s: %v", js, err)
	}
	s.faults = append(s.faults, name)
}

// A guardToxic forwards what crosses a link, after Latency milliseconds, and
// never blocks for good: a chunk the next stage has not taken within
// guardWait is dropped. toxiproxy's own latency (and noop) toxics send to the
// next stage with no way out: when a client drops its connection while data
// is on its way to it, the link's writer exits and they block forever,
// leaking their goroutines (and the link's reader behind them). Every link of
// the matrix's proxies starts with a guard at 0ms, and added latency is
// another guard, so no stage before the link's writer ever blocks for good.
type guardToxic struct {
	Latency int64  `json:"latency"`
	Row     string `json:"row"` // the row whose proxy it is, for drops
}

// drops records when each row's guards dropped a chunk: data lost by the
// test's own proxy (on a machine loaded enough that a stage stalled for
// guardWait), which no client can recover, so that checkLost can tell such a
// loss from one of the connection's.
var drops struct {
	sync.Mutex
	m map[string][]time.Time
}

// dropsOf returns when the row's guards dropped chunks.
func dropsOf(row string) []time.Time {
	drops.Lock()
	defer drops.Unlock()
	return slices.Clone(drops.m[row])
}

// guardWait bounds how long a guard waits for the next stage: long enough
// for any live loopback peer.
const guardWait = time.Second

func init() { toxics.Register("guard", new(guardToxic)) }

// GetBufferSize implements toxics.BufferedToxic.
func (t *guardToxic) GetBufferSize() int { return 1024 }

// Pipe implements toxics.Toxic.
func (t *guardToxic) Pipe(stub *toxics.ToxicStub) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			if d := time.Duration(t.Latency)*time.Millisecond - time.Since(c.Timestamp); d > 0 {
				timer := time.NewTimer(d)
				select {
				case <-timer.C:
				case <-stub.Interrupt:
					timer.Stop()
					t.forward(stub, c) // not dropped: an interrupt only changes the chain
					return
				}
			}
			t.forward(stub, c)
		}
	}
}

// forward passes c on, or drops it if the next stage does not take it within
// guardWait (nothing takes it any more, or the machine is overloaded), and
// records the drop.
func (g *guardToxic) forward(stub *toxics.ToxicStub, c *stream.StreamChunk) {
	t := time.NewTimer(guardWait)
	defer t.Stop()
	select {
	case stub.Output <- c:
	case <-t.C:
		drops.Lock()
		if drops.m == nil {
			drops.m = map[string][]time.Time{}
		}
		drops.m[g.Row] = append(drops.m[g.Row], time.Now())
		drops.Unlock()
	}
}

func portOf(addr string) int {
	_, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	return n
}

// config returns the client config for the server, through the proxy.
func (s *inproc) config(kind string) transport.Config {
	h := &transport.HTTP{URL: "http://" + s.px.Listen + "/mcp"}
	if kind == kindSSE {
		return transport.Config{Name: s.r.id, SSE: h}
	}
	return transport.Config{Name: s.r.id, HTTP: h}
}

// toxic adds a toxic in both directions.
func (s *inproc) toxic(typ string, attrs string) {
	s.r.t.Helper()
	for _, stream := range []string{"upstream", "downstream"} {
		s.add(typ+"_"+stream, typ, stream, attrs)
	}
}

// latency delays what the server sends by d.
func (s *inproc) latency(d time.Duration) {
	s.r.t.Helper()
	s.add("latency_downstream", "guard", "downstream", fmt.Sprintf(`{"latency":%d,"row":%q}`, d.Milliseconds(), s.r.id))
}

// untoxic removes the toxics of the fault, keeping the guards.
func (s *inproc) untoxic() {
	s.r.t.Helper()
	for _, name := range s.faults[2:] {
		if err := s.px.Toxics.RemoveToxic(context.Background(), name); err != nil {
			s.r.fatalf("removing toxic %s: %v", name, err)
		}
	}
	s.faults = s.faults[:2]
}

// journalRuns reads the row's journal.
func (r *run) journalRuns() map[string]int {
	runs, err := testserver.ReadJournal(r.journal)
	if err != nil {
		r.errorf("reading the journal: %v", err)
	}
	return runs
}

// control switches the faults of the row's control file.
func (r *run) control(words ...string) {
	r.t.Helper()
	if err := testserver.WriteControl(r.controlFile, words...); err != nil {
		r.fatalf("writing the control file: %v", err)
	}
}
