package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/simulate"
)

func runSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("simulate", "[--spec FILE | --config FILE --server NAME] [--seed N] [--json | --summary] SCENARIO", `
Run a connection's lifecycle in virtual time against a scripted server and print
the timeline and a summary: connect attempts (per hour), time to detect a fault,
time to recover, calls answered / failed fast / failed, and time per state. Days
of simulated time take a second. This is how to see what a policy edit does
before shipping it: edit a copy of transitions.yaml (--spec) or a server's
policies in a servers config (--config and --server), and simulate again.

SCENARIO is a built-in scenario or a scenario file (YAML):
`+scenarioList()+`
A scenario file:

  name: flapping-fast            # optional (default: the file's name without .yaml)
  description: Down 2m in 10m.   # optional: one line, said with the name
  duration: 2h
  transport: http                # or stdio: a dying stdio server is seen at once
  timeline:                      # the server's condition from each instant on
    - {at: 0s, server: up}
    - {at: 8m, server: down}     # up, down, frozen, restart (forgets sessions),
                                 # missing (its command) or garbage (on its stdout)
  repeat: 10m                    # optional: replay the changes before 10m every 10m
  calls: {every: 30s, timeout: 10s}      # optional
  latency: {connect: 20ms, probe: 2ms}   # optional

(the server is down for two minutes every ten)

The same seed gives the same timeline. With --json, transitions are printed as
JSON lines (the format mcpfsm graph --trace reads) and the summary as one
JSON object.`, stderr)
	specFile := fs.String("spec", "", "lifecycle spec to simulate (default: the built-in one)")
	configFile := fs.String("config", "", "servers config whose server's spec and policies to simulate")
	server := fs.String("server", "", "the server of --config")
	seed := fs.Uint64("seed", 1, "seed of the jitter")
	asJSON := fs.Bool("json", false, "print JSON lines")
	summaryOnly := fs.Bool("summary", false, "print the summary only")
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "mcpfsm simulate: want one SCENARIO:"+scenarioList())
		return 2
	}
	spec := mcpfsm.DefaultSpec()
	var pol *machine.Policies
	switch {
	case *specFile != "" && *configFile != "":
		fmt.Fprintln(stderr, "mcpfsm simulate: give --spec or --config, not both")
		return 2
	case *configFile != "":
		cfg, err := mcpfsm.LoadConfig(*configFile)
		if err != nil {
			fmt.Fprintln(stderr, errorText(err))
			return 1
		}
		sc, ok := cfg.Server(*server)
		if !ok {
			fmt.Fprintf(stderr, "mcpfsm simulate: %s has no server %q (use --server)\n", *configFile, *server)
			return 2
		}
		spec, pol = sc.Spec, &sc.Policies
	case *specFile != "":
		var err error
		if spec, err = loadSpecFile(*specFile); err != nil {
			fmt.Fprintln(stderr, errorText(err))
			return 1
		}
	}
	sc, ok := simulate.Builtin()[fs.Arg(0)]
	if !ok {
		if !strings.ContainsAny(fs.Arg(0), "./") {
			fmt.Fprintf(stderr, "mcpfsm simulate: no built-in scenario %q:%s", fs.Arg(0), scenarioList())
			return 2
		}
		// Read as a spec is: a regular file, size-capped (simulate.LoadFile is not).
		data, err := machine.ReadFile(fs.Arg(0))
		if err == nil {
			sc, err = simulate.Load(fs.Arg(0), data)
		}
		if err != nil {
			fmt.Fprintln(stderr, errorText(err))
			return 1
		}
	}
	res := simulate.Run(spec, pol, sc, *seed)
	if *asJSON {
		if !*summaryOnly {
			effective := spec.Defaults()
			if pol != nil {
				effective = *pol
			}
			at := time.Time{}
			if len(res.Transitions) > 0 {
				at = res.Transitions[0].At
			}
			line, _ := json.Marshal(newServerLine(at, sc.Name, effective))
			fmt.Fprintf(stdout, "%s\n", line)
		}
		for _, tr := range res.Transitions {
			if !*summaryOnly {
				line, _ := json.Marshal(toEvent(sc.Name, tr))
				fmt.Fprintf(stdout, "%s\n", line)
			}
		}
		line, _ := json.Marshal(map[string]any{"summary": res.Summary, "scenario": sc.Name})
		fmt.Fprintf(stdout, "%s\n", line)
		return 0
	}
	if !*summaryOnly {
		res.WriteTimeline(stdout)
		fmt.Fprintln(stdout)
	}
	res.WriteSummary(stdout)
	return 0
}

func scenarioList() string {
	var b strings.Builder
	b.WriteString("\n")
	builtin := simulate.Builtin()
	width := 0
	for _, name := range simulate.BuiltinNames() {
		width = max(width, len(name))
	}
	for _, name := range simulate.BuiltinNames() {
		fmt.Fprintf(&b, "  %-*s  %s (%s)\n", width, name, builtin[name].Description, builtin[name].Duration)
	}
	return b.String()
}
