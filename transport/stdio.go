package transport

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"
)

// process is a stdio server's child process and the parent's ends of its
// stdin and stdout pipes.
//
// The parent owns both pipe ends itself (instead of exec.Cmd's StdinPipe and
// StdoutPipe), so that reaping the child never closes the read end under the
// reader, and a forced close can close it at will.
type process struct {
	cmd    *exec.Cmd
	stdin  *os.File        // the write end of the child's stdin
	stdout *os.File        // the read end of the child's stdout
	life   context.Context // ends when the session must be torn down by force

	exited  chan struct{} // closed once the child is reaped
	waitErr error         // cmd.Wait's result, set before exited is closed

	// ready is set once Dial succeeded. Before, a shutdown (the SDK closes
	// the connection when the handshake fails) kills at once: there is no
	// session to close gracefully, and Dial must not wait for a server that
	// ignores stdin EOF.
	ready atomic.Bool

	mu     sync.Mutex
	reaped bool // the child is (being) reaped: its group may not be signalled any more

	shutOnce sync.Once
	shutErr  error
}

// startProcess starts the child in a process group of its own, with a
// goroutine that reaps it whenever it exits (the goroutine ends then).
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
	if s.Stderr != nil {
		cmd.Stderr = s.Stderr
		// If Stderr is not a file, exec copies it in a goroutine that Wait
		// waits for; a descendant holding the pipe must not stall the reaper.
		cmd.WaitDelay = time.Second
	}
	setProcessGroup(cmd)

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
	p := &process{cmd: cmd, stdin: inW, stdout: outR, life: life, exited: make(chan struct{})}
	go p.reap()
	return p, nil
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
	close(p.exited)
}

// kill sends SIGKILL to the child's process group and to the child itself
// (in case it left its group), unless it was already reaped.
func (p *process) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		killTree(p.cmd)
		_ = p.cmd.Process.Kill()
	}
}

// shutdown closes the child's stdin and waits for it to exit, until life ends
// (at once if Dial has not succeeded); then it kills the child's group. It
// returns once the child is reaped, with its exit status (nil for a clean
// exit, an *exec.ExitError otherwise).
func (p *process) shutdown() error {
	p.shutOnce.Do(func() {
		p.stdin.Close()
		if !p.ready.Load() {
			p.kill()
		}
		select {
		case <-p.exited:
		case <-p.life.Done():
			p.kill()
			<-p.exited
		}
		// Unblocks the SDK's reader if a descendant outside the group still
		// holds the pipe's write end.
		p.stdout.Close()
		p.shutErr = p.waitErr
	})
	return p.shutErr
}

// procReader is the child's stdout for mcp.IOTransport. Its Close does
// nothing: closing the pipe before the child exits could kill it with SIGPIPE;
// procWriter.Close shuts the child down and then closes stdout.
type procReader struct{ p *process }

// Read reads the child's stdout.
func (r procReader) Read(b []byte) (int, error) { return r.p.stdout.Read(b) }

// Close does nothing (see procReader).
func (r procReader) Close() error { return nil }

// procWriter is the child's stdin for mcp.IOTransport. Its Close is the
// graceful shutdown of the spec: close stdin, wait for exit (until the session
// is forced), kill.
type procWriter struct{ p *process }

// Write writes to the child's stdin.
func (w procWriter) Write(b []byte) (int, error) { return w.p.stdin.Write(b) }

// Close shuts the child down (see process.shutdown).
func (w procWriter) Close() error { return w.p.shutdown() }
