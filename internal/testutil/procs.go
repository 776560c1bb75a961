package testutil

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A Proc is a child process of this one.
type Proc struct {
	PID     int    // its process ID
	State   string // R, S, T (stopped), Z (zombie)...
	Cmdline string // its arguments, joined by spaces
}

// Children returns this process's child processes, zombies included.
func Children() []Proc {
	self := os.Getpid()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []Proc
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
		s := string(data)
		rest := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(rest) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(rest[1]); ppid != self {
			continue
		}
		pid, _ := strconv.Atoi(strings.Fields(s)[0])
		cmd, _ := os.ReadFile(filepath.Join(filepath.Dir(path), "cmdline"))
		out = append(out, Proc{PID: pid, State: rest[0], Cmdline: strings.ReplaceAll(string(cmd), "\x00", " ")})
	}
	return out
}

// ChildPIDs returns the pids of Children.
func ChildPIDs() []int {
	var out []int
	for _, p := range Children() {
		out = append(out, p.PID)
	}
	return out
}

// Zombies returns the pids of this process's children that have exited and not been
// reaped.
func Zombies() []int {
	var out []int
	for _, p := range Children() {
		if p.State == "Z" {
			out = append(out, p.PID)
		}
	}
	return out
}

// OpenFiles returns the targets of this process's open file descriptors, by number.
func OpenFiles() map[string]string {
	entries, _ := os.ReadDir("/proc/self/fd")
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil {
			out[e.Name()] = target
		}
	}
	return out
}
