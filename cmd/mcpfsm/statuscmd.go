package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
)

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("status", "[--timeout D] [--json] CONFIG", `
Connect to every server of a servers config, wait until each is ready (or in a
state it will not leave by itself soon: one that needs a fixed config or new
credentials) or until --timeout, then print each server's status and close the
connections: its state and since when, the last success, the last failure with
its cause, the failures counted toward the breaker, the next scheduled move, and
what to do when a person must act. With --json, print the statuses as a JSON
array: the "servers" of what /status of mcpfsm run --http-status serves.

The exit code is 0 if every server is ready (its calls are served), 1 if any is
not, 2 for a usage error. Scripts and health checks can rely on it.`, stderr)
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the servers to be ready")
	asJSON := fs.Bool("json", false, "print the statuses as JSON")
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "mcpfsm status: want exactly one CONFIG")
		return 2
	}
	if *timeout <= 0 {
		fmt.Fprintln(stderr, "mcpfsm status: --timeout must be positive")
		return 2
	}
	cfg, err := mcpfsm.LoadConfig(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, errorText(err))
		return 1
	}
	// The failures are the statuses' to show; log records would repeat them.
	m, err := mcpfsm.NewManager(cfg, mcpfsm.ManagerOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(stderr, "mcpfsm status:", errorText(err))
		return 1
	}
	wctx, cancel := context.WithTimeout(ctx, *timeout)
	sts := waitSettled(wctx, m)
	cancel()
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Close(cctx); err != nil {
		fmt.Fprintln(stderr, "mcpfsm status:", errorText(err))
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(sts)
	} else {
		printStatuses(stdout, sts, time.Now())
	}
	for _, st := range sts {
		if st.Calls != machine.Serve {
			return 1
		}
	}
	return 0
}

// waitSettled waits until every server is ready or needs a person to act, or until
// ctx ends, and returns their statuses then.
func waitSettled(ctx context.Context, m *mcpfsm.Manager) []mcpfsm.Status {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		sts := m.Status()
		settled := true
		for _, st := range sts {
			settled = settled && (st.Calls == machine.Serve || st.ActionNeeded)
		}
		if settled {
			return sts
		}
		select {
		case <-ctx.Done():
			return m.Status()
		case <-tick.C:
		}
	}
}

// printStatuses prints statuses as a table for people, then the actions needed.
func printStatuses(w io.Writer, sts []mcpfsm.Status, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tSTATE\tFOR\tLAST SUCCESS\tLAST FAILURE\tFAILURES\tNEXT")
	var actions []string
	for _, st := range sts {
		success, failure, next := "-", "-", "-"
		if s := st.LastSuccess; s != nil {
			success = s.What + " " + ago(now, s.At)
		}
		if f := st.LastFailure; f != nil {
			failure = f.Cause.String() + " " + ago(now, f.At) + ": " + printable(f.Message, 120)
		}
		if n := st.Next; n != nil {
			next = n.What + " " + ago(now, n.At)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\n", printable(st.Server, 64), st.State, roundHuman(now.Sub(st.Since)),
			success, failure, st.Failures, st.BreakerThreshold, next)
		if st.ActionNeeded {
			actions = append(actions, fmt.Sprintf("%s: %s", printable(st.Server, 64), st.Action))
		}
	}
	_ = tw.Flush()
	if len(actions) > 0 {
		fmt.Fprintf(w, "\nAction needed:\n  %s\n", strings.Join(actions, "\n  "))
	}
}
