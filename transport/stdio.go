package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// process is a stdio server's child process and the parent's ends of its
// stdin and stdout pipes.
//
// The parent owns both pipe ends itself (instead of exec.Cmd's StdinPipe and
// StdoutPipe), so that reaping the child never closes the read end under the
// reader, and a forced close can close it at will. The write end of stdin is
// pollable (os.Pipe makes it non-blocking, and only the child's end is handed
// to exec), so a write to it can be interrupted with a deadline (see
// pipeConn).
type process struct {
	cmd    *exec.Cmd
	stdin  *os.File        // the write end of the child's stdin
	stdout *os.File        // the read end of the child's stdout
	stderr *tailWriter     // the last bytes of the child's stderr
	life   context.Context // ends when the session must be torn down by force

	exited  chan struct{} // closed once the child is reaped
	waitErr error         // cmd.Wait's result, set before exited is closed

	mu     sync.Mutex
	reaped bool // the child is (being) reaped: its group may not be signalled any more

	stdinOnce    sync.Once
	stdoutOnce   sync.Once
	stdoutClosed chan struct{} // closed by closeStdout

	// wrote counts the bytes of the message being written (see pipeConn):
	// only the writer holding pipeConn's slot touches it.
	wrote int
}

// Timings of a stdio child's end.
const (
	// termDelay is how long a graceful close waits for the child to exit
	// after closing its stdin before it sends SIGTERM, when the close context
	// has no deadline (with one, half the time left).
	termDelay = 2 * time.Second
	// endGrace is how long a connection that ended by itself (not by Close)
	// waits for the child to exit on its own (it closed its stdout: it is
	// probably exiting) before killing it, and then for the reap: the exit
	// status and the last of stderr go into the end's error. It bounds how
	// late OnEnd may come; it never runs inside the SDK's lock.
	endGrace = 250 * time.Millisecond
)

// startProcess starts the child in a process group of its own, with a
// goroutine that reaps it whenever it exits (the goroutine ends then).
//
// The child's stderr always goes through a pipe that keeps its last
// stderrTailSize bytes (for the errors of a child that fails) and passes
// everything on to s.Stderr, if set: exec copies it on a goroutine that ends
// when the child and everything holding the pipe have exited (or WaitDelay
// after the child exited).
func startProcess(life context.Context, s *Stdio) (*process, error) {
	cmd := exec.Command(s.Command, s.Args...)
	cmd.Dir = s.Dir
	if len(s.Env) > 0 {
		env := os.Environ()
		for _, k := range sortedKeys(s.Env) {
			env = append(env, k+"="+s.Env[k])
		}
		cmd.Env = env
	}
	tail := &tailWriter{w: s.Stderr}
	cmd.Stderr = tail
	// exec copies stderr in a goroutine that Wait waits for; a descendant
	// holding the pipe must not stall the reaper.
	cmd.WaitDelay = time.Second
	setProcessGroup(cmd)
	setParentDeathSignal(cmd)

	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	err = cmd.Start()
	// The child has its own copies now (or never will).
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	p := &process{cmd: cmd, stdin: inW, stdout: outR, stderr: tail, life: life, exited: make(chan struct{}), stdoutClosed: make(chan struct{})}
	running.add(p)
	go p.reap()
	return p, nil
}

// running are the stdio servers this process has started and not yet reaped (see
// KillAll).
var running processes

type processes struct {
	mu sync.Mutex
	m  map[*process]struct{}
}

func (ps *processes) add(p *process) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.m == nil {
		ps.m = map[*process]struct{}{}
	}
	ps.m[p] = struct{}{}
}

func (ps *processes) remove(p *process) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	delete(ps.m, p)
}

// KillAll kills, at once and by force, every stdio server this process has started
// and that has not exited yet, with its process group (see Stdio). It is for a
// program about to exit before its connections have finished closing (a Close whose
// context ended first, as a command's bounded shutdown does: a server's close is
// bounded by its teardown timeout, which may be longer): the kernel kills such a
// server itself when its client dies (on Linux), but not what the server started.
// It does not wait.
func KillAll() {
	running.mu.Lock()
	defer running.mu.Unlock()
	for p := range running.m {
		p.kill()
	}
}

// reap waits for the child, kills whatever is left of its process group, and
// reaps it. It runs on its own goroutine from start to exit, so that a child
// that dies is reaped at once whatever the rest of the session does.
func (p *process) reap() {
	if waitExited(p.cmd.Process.Pid) == nil {
		// The child is a zombie: its pid, which is its group's ID, cannot be
		// reused until it is reaped, so the group is still safe to signal.
		p.mu.Lock()
		killTree(p.cmd)
		p.reaped = true
		p.mu.Unlock()
		p.waitErr = p.cmd.Wait()
	} else {
		p.waitErr = p.cmd.Wait()
		p.mu.Lock()
		killTree(p.cmd)
		p.reaped = true
		p.mu.Unlock()
	}
	running.remove(p)
	close(p.exited)
	// A descendant that left the child's process group (setsid) may still
	// hold the write end of its stdout: the reader would then never see the
	// stream end, and the end of the child would go unreported until a probe
	// timed out, every call in flight waiting for its deadline. Once the
	// child has been reaped and the reader has taken its last words (nothing
	// is left in the pipe, looked at every endGrace; what the reader has
	// buffered survives the close), or at most maxDrain after the reap,
	// stdout is closed here; procReader reads that as the stream's end.
	reaped := time.Now()
	t := time.NewTimer(endGrace)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-p.stdoutClosed:
			return
		}
		if n, ok := pipeBuffered(p.stdout); !ok || n == 0 || time.Since(reaped) >= maxDrain {
			p.closeStdout()
			return
		}
		t.Reset(endGrace)
	}
}

// maxDrain bounds how long a reaped child's stdout is left open for the reader to
// take what is still in the pipe (see reap).
const maxDrain = 5 * time.Second

// kill sends SIGKILL to the child's process group and to the child itself
// (in case it left its group), unless it was already reaped. It never waits.
func (p *process) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		killTree(p.cmd)
		_ = p.cmd.Process.Kill()
	}
}

// terminate sends SIGTERM to the child's process group and to the child,
// unless it was already reaped. It never waits.
func (p *process) terminate() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		termTree(p.cmd)
	}
}

// closeStdin closes the write end of the child's stdin: the MCP way to ask a
// stdio server to exit. It interrupts a write blocked on the pipe. It never
// waits.
func (p *process) closeStdin() { p.stdinOnce.Do(func() { p.stdin.Close() }) }

// closeStdout closes the read end of the child's stdout, once the child has
// exited: it unblocks the SDK's reader if a descendant outside the group still
// holds the pipe's write end. (Closed earlier, it could kill the child with
// SIGPIPE.)
func (p *process) closeStdout() {
	p.stdoutOnce.Do(func() {
		p.stdout.Close()
		close(p.stdoutClosed)
	})
}

// waitFor waits up to d for the child to be reaped, and reports whether it was.
func (p *process) waitFor(d time.Duration) bool {
	select {
	case <-p.exited:
		return true
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
		return true
	case <-t.C:
		return false
	}
}

// stop is the graceful shutdown of the MCP specification, for Close: close
// stdin, wait until termAt for the child to exit, send SIGTERM, wait until
// the session's life ends (the close context ended: Close forced it), send
// SIGKILL. It returns once the child is reaped, with its exit status (nil for
// a clean exit, an *exec.ExitError otherwise).
func (p *process) stop(termAt time.Time) error {
	p.closeStdin()
	t := time.NewTimer(time.Until(termAt))
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		p.terminate()
		select {
		case <-p.exited:
		case <-p.life.Done():
			p.kill()
			<-p.exited
		}
	case <-p.life.Done():
		p.kill()
		<-p.exited
	}
	p.closeStdout()
	return p.waitErr
}

// stopNow kills the child and waits for the reap: for a session that never
// was (Dial failed), which has nothing to close gracefully.
func (p *process) stopNow() {
	p.closeStdin()
	p.kill()
	<-p.exited
	p.closeStdout()
}

// ended settles the end of a connection that ended by itself, off the SDK's
// lock (on the goroutine that reports the end), and returns the error to
// report: err, unless err is io.EOF (the child closed its stdout) and the
// child exited on its own within endGrace with a status that says more. The
// child is killed either way (a connection that ended has no use for it);
// nothing waits on the server's good will beyond endGrace.
func (p *process) ended(err error) error {
	if err == io.EOF && p.waitFor(endGrace) && p.waitErr != nil {
		err = p.waitErr
	}
	p.closeStdin()
	p.kill()
	if p.waitFor(endGrace) {
		p.closeStdout()
	}
	return err
}

// procReader is the child's stdout for the session's lineConn. Its Close does
// nothing: closing the pipe before the child exits could kill it with SIGPIPE;
// stdout is closed once the child has exited (see closeStdout).
type procReader struct{ p *process }

// Read reads the child's stdout. Once we closed it (the child was reaped,
// or the session closed), the stream has ended: io.EOF.
func (r procReader) Read(b []byte) (int, error) {
	n, err := r.p.stdout.Read(b)
	if err != nil && errors.Is(err, os.ErrClosed) {
		err = io.EOF
	}
	return n, err
}

// Close does nothing (see procReader).
func (r procReader) Close() error { return nil }

// procWriter is the child's stdin for the session's lineConn. Its Close only closes
// stdin: the SDK calls it with its connection's lock held, so it must never
// wait for the child (waiting is Close's business, or the end's: see
// process.stop and process.ended).
type procWriter struct{ p *process }

// Write writes to the child's stdin, and counts what it wrote for pipeConn.
func (w procWriter) Write(b []byte) (int, error) {
	n, err := w.p.stdin.Write(b)
	w.p.wrote += n
	return n, err
}

// Close closes the child's stdin (see procWriter).
func (w procWriter) Close() error {
	w.p.closeStdin()
	return nil
}

// errStreamBroken is wrapped by the error of a write to a stdio server's stdin
// that was interrupted after part of the message had gone out: the stream no
// longer frames messages, so the session is ended and the child killed.
var errStreamBroken = errors.New("the write to the server's stdin was interrupted part-way: the stream is broken")

// aLongTimeAgo is a write deadline that has passed: it interrupts a write.
var aLongTimeAgo = time.Unix(1, 0)

// pipeConn makes the writes of a stdio connection end with their context and
// with the session's life. The SDK's connection writes a whole message under
// its own lock and looks at the context only before it starts: a server that
// stops reading its stdin would block that write, and every write queued
// behind it, for good.
//
// pipeConn serializes writes itself, with a slot that a waiting write gives
// up when its context or the session's life ends (the stream is intact then:
// nothing of that message was written), and interrupts the write holding the
// slot by setting a past write deadline on the pipe when its context or the
// life ends. A write interrupted after part of its message went out has
// broken the stream: the session is brought down (see Session.breakDown).
type pipeConn struct {
	mcp.Connection
	s    *Session
	p    *process
	slot chan struct{} // holds a token while a write is under way
}

func newPipeConn(c mcp.Connection, s *Session, p *process) *pipeConn {
	return &pipeConn{Connection: c, s: s, p: p, slot: make(chan struct{}, 1)}
}

// Write implements mcp.Connection.
func (c *pipeConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	select {
	case c.slot <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.p.life.Done():
		return context.Cause(c.p.life)
	}
	defer func() { <-c.slot }()
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.p.life.Err() != nil {
		return context.Cause(c.p.life)
	}

	w := &pipeWrite{f: c.p.stdin, fired: make(chan struct{})}
	stopCtx := context.AfterFunc(ctx, w.interrupt)
	stopLife := context.AfterFunc(c.p.life, w.interrupt)
	c.p.wrote = 0
	err := c.Connection.Write(ctx, msg)
	// stop reports false if the interruption started: wait for it to be
	// done, then clear the deadline for the next write.
	if a, b := stopCtx(), stopLife(); !a || !b {
		<-w.fired
		_ = c.p.stdin.SetWriteDeadline(time.Time{})
	}
	if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	cause := ctx.Err()
	if cause == nil {
		cause = context.Cause(c.p.life)
	}
	if n := c.p.wrote; n > 0 {
		broken := fmt.Errorf("%w (after %d bytes): %w", errStreamBroken, n, cause)
		c.s.breakDown(broken)
		return broken
	}
	return cause
}

// pipeWrite is the interruption of one write: the first of its context and
// the session's life to end sets a past write deadline on the pipe.
type pipeWrite struct {
	f     *os.File
	once  sync.Once
	fired chan struct{} // closed once the deadline is set
}

func (w *pipeWrite) interrupt() {
	w.once.Do(func() {
		_ = w.f.SetWriteDeadline(aLongTimeAgo)
		close(w.fired)
	})
}

// tailWriter keeps the last stderrTailSize bytes written to it, and passes
// everything on to w, if set. It never fails: a failing w must not stop exec
// from draining the child's stderr (the child would block writing to it).
type tailWriter struct {
	w         io.Writer
	wmu       sync.Mutex // serializes writes to w: exec's copy and noteNoise's passer
	mu        sync.Mutex
	buf       []byte // the last bytes, at most stderrTailSize
	truncated bool   // bytes were dropped from buf's front

	// The lines noteNoise has yet to pass on to w (under mu): at most
	// maxNoiseQueued bytes of them, the lines past that dropped and counted.
	queue   [][]byte
	queued  int
	dropped int
	passing bool // a goroutine passes the queue on
}

// stderrTailSize is how much of a stdio child's stderr is kept for the errors
// of a child that fails to start or dies (Error.StderrTail).
const stderrTailSize = 4 << 10

// maxNoiseQueued bounds the bytes of the lines noteNoise holds for a w that is
// slow to take them.
const maxNoiseQueued = 64 << 10

// Write implements io.Writer.
func (t *tailWriter) Write(b []byte) (int, error) {
	t.mu.Lock()
	t.keep(b)
	t.mu.Unlock()
	if t.w != nil {
		t.wmu.Lock()
		_, _ = t.w.Write(b)
		t.wmu.Unlock()
	}
	return len(b), nil
}

// keep adds b to the tail (under mu).
func (t *tailWriter) keep(b []byte) {
	if len(b) >= stderrTailSize {
		t.buf = append(t.buf[:0], b[len(b)-stderrTailSize:]...)
		t.truncated = true
		return
	}
	if drop := len(t.buf) + len(b) - stderrTailSize; drop > 0 {
		t.buf = append(t.buf[:0], t.buf[drop:]...)
		t.truncated = true
	}
	t.buf = append(t.buf, b...)
}

// noteNoise is Write for a line the session's reader found on the child's
// stdout (Session.stdoutNoise; line is its own): kept in the tail at once, and
// passed on to w without waiting for it, by a goroutine that lives while lines
// wait (one at a time, so they reach w in order). Written by the reader itself,
// a w that blocked (a terminal paused, a pipe nobody reads) held the session's
// reads, and with them its calls, its Dial past its deadline and its Close, for
// as long as w blocked; exec's copy of stderr, blocked the same way, holds only
// the child. Past maxNoiseQueued bytes waiting, a line is dropped, and w is told
// how many were once it takes lines again.
func (t *tailWriter) noteNoise(line []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.keep(line)
	if t.w == nil {
		return
	}
	if t.queued+len(line) > maxNoiseQueued {
		t.dropped++
		return
	}
	t.queue = append(t.queue, line)
	t.queued += len(line)
	if !t.passing {
		t.passing = true
		go t.passNoise()
	}
}

// passNoise passes the lines noteNoise queued on to w, until none is left.
func (t *tailWriter) passNoise() {
	for {
		t.mu.Lock()
		queue, dropped := t.queue, t.dropped
		t.queue, t.queued, t.dropped = nil, 0, 0
		if len(queue) == 0 && dropped == 0 {
			t.passing = false
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
		t.wmu.Lock()
		if dropped > 0 {
			_, _ = fmt.Fprintf(t.w, "stdout: (%d lines dropped: they came faster than they could be passed on)\n", dropped)
		}
		for _, line := range queue {
			_, _ = t.w.Write(line)
		}
		t.wmu.Unlock()
	}
}

// tail returns the bytes kept, and whether earlier ones were dropped.
func (t *tailWriter) tail() (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf), t.truncated
}
