package faults

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/testutil"
)

// Rows run in parallel, so a row cannot compare the process's goroutines, file
// descriptors and children before and after itself. It checks what it can
// attribute to itself instead, and TestMatrix compares the whole process
// before and after all rows:
//
//   - goroutines: every goroutine a row starts, directly or not, inherits the
//     pprof label the row puts on its test goroutine; the machine's owner,
//     which often runs on a goroutine a timer started (time.AfterFunc, which
//     carries no label), is labelled by the row's Observer at each transition,
//     before the state's effect starts, so the effects' goroutines are the
//     row's too;
//   - file descriptors: sockets to or listening on the row's ports, and the
//     pipes of the row's stdio children;
//   - child processes: the row's servers carry a marker in their arguments.

// labelKey is the pprof label that marks a row's goroutines.
const labelKey = "faultrow"

// labelRow marks the calling goroutine, and every goroutine it starts from
// now on, as the row's.
func labelRow(id string) {
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels(labelKey, id)))
}

// unlabel removes the calling goroutine's labels.
func unlabel() { pprof.SetGoroutineLabels(context.Background()) }

// labeled returns how many live goroutines carry the row's label, and their
// stacks.
func labeled(id string) (int, string) {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	want := fmt.Sprintf("%q:%q", labelKey, id)
	n := 0
	var stacks strings.Builder
	for _, block := range strings.Split(buf.String(), "\n\n") {
		// The first block starts with the profile's header line.
		if i := strings.Index(block, "\n"); i >= 0 && !strings.Contains(block[:i], " @ ") {
			block = block[i+1:]
		}
		lines := strings.SplitN(block, "\n", 3)
		if len(lines) < 2 || !strings.HasPrefix(lines[1], "# labels: ") || !strings.Contains(lines[1], want) {
			continue
		}
		count, _ := strconv.Atoi(strings.Fields(lines[0])[0])
		n += count
		stacks.WriteString(block)
		stacks.WriteString("\n\n")
	}
	return n, stacks.String()
}

// goroutineTop returns the first function of each stack in a labeled()
// dump other than the runtime's, for a short report.
func goroutineTop(stacks string) []string {
	var tops []string
	for _, block := range strings.Split(stacks, "\n\n") {
		for _, line := range strings.Split(block, "\n") {
			if strings.HasPrefix(line, "# labels:") {
				continue
			}
			f := strings.Fields(line)
			if len(f) < 3 || f[0] != "#" || strings.HasPrefix(f[2], "runtime.") || strings.HasPrefix(f[2], "internal/") ||
				strings.HasPrefix(f[2], "sync.") || strings.HasPrefix(f[2], "time.") {
				continue
			}
			name := f[2]
			if i := strings.LastIndexByte(name, '+'); i > 0 {
				name = name[:i]
			}
			tops = append(tops, name)
			break
		}
	}
	return tops
}

// tcpSocket is a row of /proc/net/tcp{,6}.
type tcpSocket struct {
	local, remote int // ports
	listen        bool
}

// tcpSockets returns the TCP sockets of the network namespace by inode.
func tcpSockets() map[string]tcpSocket {
	out := map[string]tcpSocket{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 10 {
				continue
			}
			out[fields[9]] = tcpSocket{local: hexPort(fields[1]), remote: hexPort(fields[2]), listen: fields[3] == "0A"}
		}
	}
	return out
}

func hexPort(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	p, _ := strconv.ParseUint(addr[i+1:], 16, 32)
	return int(p)
}

// leakedFDs returns this process's descriptors that belong to a row: sockets
// connected to one of its ports or listening on one, and the given pipes.
func leakedFDs(ports []int, pipes map[string]bool) []string {
	var out []string
	var socks map[string]tcpSocket
	for fd, target := range testutil.OpenFiles() {
		switch {
		case strings.HasPrefix(target, "socket:["):
			if socks == nil {
				socks = tcpSockets()
			}
			s, ok := socks[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")]
			if ok && (slices.Contains(ports, s.remote) || s.listen && slices.Contains(ports, s.local)) {
				out = append(out, fmt.Sprintf("fd %s: socket :%d→:%d", fd, s.local, s.remote))
			}
		case pipes[target]:
			out = append(out, fmt.Sprintf("fd %s: %s", fd, target))
		}
	}
	slices.Sort(out)
	return out
}

// marked returns the child processes whose command line holds marker as an
// argument of its own.
func marked(marker string) []testutil.Proc {
	var out []testutil.Proc
	for _, p := range testutil.Children() {
		if slices.Contains(strings.Fields(p.Cmdline), marker) {
			out = append(out, p)
		}
	}
	return out
}

// liveChildren returns the pids of this process's children cheaply, from
// the children files of its threads (which may list zombies too).
func liveChildren() []int {
	files, _ := filepath.Glob("/proc/self/task/*/children")
	var out []int
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, field := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(field); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// pipesOf returns the pipes a process has as its stdin and stdout: the same
// pipes as the ends this process holds.
func pipesOf(pid int) []string {
	var out []string
	for _, fd := range []string{"0", "1"} {
		target, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", fd))
		if err == nil && strings.HasPrefix(target, "pipe:[") {
			out = append(out, target)
		}
	}
	return out
}

// A childWatch samples a row's stdio children while it runs, to learn their
// pids and the pipes this process holds to them.
type childWatch struct {
	marker string
	stop   chan struct{}
	done   chan struct{}

	mu    sync.Mutex
	pids  []int
	pipes map[string]bool
}

func watchChildren(marker string) *childWatch {
	w := &childWatch{marker: marker, stop: make(chan struct{}), done: make(chan struct{}), pipes: map[string]bool{}}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			w.sample()
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *childWatch) sample() {
	for _, pid := range liveChildren() {
		cmd, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil || !slices.Contains(strings.Split(string(cmd), "\x00"), w.marker) {
			continue
		}
		pipes := pipesOf(pid)
		w.mu.Lock()
		if !slices.Contains(w.pids, pid) {
			w.pids = append(w.pids, pid)
		}
		for _, pp := range pipes {
			w.pipes[pp] = true
		}
		w.mu.Unlock()
	}
}

// end stops the sampling and returns the pids and pipes seen.
func (w *childWatch) end() ([]int, map[string]bool) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pids, w.pipes
}

// baseline is the state of the whole process.
type baseline struct {
	goroutines, fds, children int
}

func measure() baseline {
	return baseline{goroutines: runtime.NumGoroutine(), fds: len(testutil.OpenFiles()), children: len(testutil.Children())}
}

// settle waits, for up to within, until ok holds, and returns whether it did.
func settle(within time.Duration, ok func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if ok() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLabeledCountsEveryGroup: labeled counts the goroutines of every group of
// the profile, the largest too (the first, which follows the profile's header
// line: it was once skipped, and with it a row's leak whenever the leak was
// the largest group of the process).
func TestLabeledCountsEveryGroup(t *testing.T) {
	const id, n = "labeled-self-test", 50 // more than any other group
	stop := make(chan struct{})
	var started sync.WaitGroup
	func() {
		labelRow(id)
		defer unlabel()
		for range n {
			started.Add(1)
			go func() {
				started.Done()
				<-stop
			}()
		}
	}()
	started.Wait()
	got, stacks := labeled(id)
	close(stop)
	if got != n {
		t.Errorf("labeled counted %d goroutines, want %d:\n%s", got, n, stacks)
	}
}
