package mcpfsm

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// instant is an Invoker whose effects succeed at once: connect, probe and teardown cost
// nothing, so that what a run of many machines shows is the machines' timing alone.
type instant struct{}

var _ effects.Effects = instant{}

func (instant) Connect(context.Context, machine.Invocation) machine.Event {
	return machine.Event{Trigger: states.Connected, Session: 1}
}

func (i instant) Replace(ctx context.Context, inv machine.Invocation) machine.Event {
	return i.Connect(ctx, inv)
}

func (instant) Probe(context.Context, machine.Invocation) machine.Event {
	return machine.Event{Trigger: states.ProbeOK, Session: 1}
}

func (instant) Teardown(context.Context, machine.Invocation) machine.Event {
	return machine.Event{Trigger: states.TornDown}
}

func (instant) Retire(context.Context, machine.Invocation) machine.Event {
	return machine.Event{Trigger: states.Retired}
}

// Probe spread: spreadIntervals keepalive intervals of spreadInterval are watched, in
// slices of 1% of the interval.
const (
	spreadInterval  = time.Second
	spreadIntervals = 5
	spreadSlices    = 100 * spreadIntervals
)

// BenchmarkProbeSpread starts *idleMachinesFlag (10,000) connections of the default
// lifecycle at the same instant, with the same keepalive interval (jitter 0.1), and
// counts their probes in slices of 1% of the interval over spreadIntervals intervals.
// It reports the largest count of any slice divided by the count a uniform spread
// would put in each (the probes seen over the number of slices), twice (goal 2;
// connections probing in lockstep would score 100):
//
//   - peak/uniform: as scheduled, in virtual time (machine.Sim: the machine's core
//     with the default 30s interval and the keepalive delay of package effects, each
//     connection with its own random source, as each Machine has);
//   - wall-peak/uniform: as it happens, on the wall clock, with real Machines whose
//     effects cost nothing and a 1s interval. This one also counts the bursts that
//     follow any stall of the process (a collection, a CPU taken by a neighbour): the
//     timers that fell due meanwhile fire together.
//
// One op is the whole experiment; run it with -benchtime=1x.

func BenchmarkProbeSpread(b *testing.B) {
	for b.Loop() {
		sched, n := scheduledSpread(b, DefaultSpec(), *idleMachinesFlag)
		wall, _ := probeSpread(b, *idleMachinesFlag)
		b.ReportMetric(sched, "peak/uniform")
		b.ReportMetric(wall, "wall-peak/uniform")
		b.ReportMetric(float64(n), "probes")
		b.ReportMetric(0, "ns/op")
	}
}

// spreadWorld is a simulated server that answers at once; it records the instants of
// probes.
type spreadWorld struct {
	instant
	probes *[]time.Time
}

func (spreadWorld) Start(machine.Env) {}

func (w spreadWorld) Observe(tr machine.Transition) {
	if tr.To == states.Probing {
		*w.probes = append(*w.probes, tr.At)
	}
}

// scheduledSpread simulates n connections started at the same instant with the
// default keepalive, for spreadIntervals intervals, and returns the peak-to-uniform
// ratio of their probes and the number of probes.
func scheduledSpread(b *testing.B, spec *machine.Spec, n int) (float64, int) {
	pol := DefaultSpec().Defaults()
	every := pol.KeepaliveInterval
	slice := every / 100
	var counts [spreadSlices]int
	var probes []time.Time
	for i := range n {
		sim := machine.NewSim(spec, machine.SimOptions{
			World: spreadWorld{probes: &probes},
			Rand:  rand.New(rand.NewPCG(uint64(i), 0x5eed)),
		})
		start := sim.Now()
		sim.Post(machine.Event{Trigger: states.Start})
		sim.RunUntil(start.Add(spreadIntervals * every))
		for _, at := range probes {
			if k := int(at.Sub(start) / slice); k < spreadSlices {
				counts[k]++
			}
		}
		probes = probes[:0]
	}
	return peakRatio(b, counts[:], slice)
}

// peakRatio returns the largest count of counts over their mean, and their sum.
func peakRatio(b *testing.B, counts []int, slice time.Duration) (float64, int) {
	total, peak, at := 0, 0, 0
	for i, c := range counts {
		total += c
		if c > peak {
			peak, at = c, i
		}
	}
	uniform := float64(total) / float64(len(counts))
	b.Logf("%d probes in %d slices of %s: %.1f per slice if uniform, at most %d (slice %d, around it %v)",
		total, len(counts), slice, uniform, peak, at, counts[max(0, at-3):min(len(counts), at+4)])
	return float64(peak) / max(uniform, 1), total
}

// probeSpread runs the experiment of BenchmarkProbeSpread with n machines and returns
// the peak-to-uniform ratio and the number of probes counted.
func probeSpread(b *testing.B, n int) (float64, int) {
	pol := DefaultSpec().Defaults()
	pol.KeepaliveInterval = spreadInterval
	var (
		counts [spreadSlices]atomic.Int64
		start  atomic.Int64 // UnixNano of the window's start; 0 until it starts
	)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	observe := func(tr machine.Transition) {
		t0 := start.Load()
		if tr.To != states.Probing || t0 == 0 {
			return
		}
		if i := (tr.At.UnixNano() - t0) / int64(spreadInterval/100); i >= 0 && i < spreadSlices {
			counts[i].Add(1)
		}
	}
	ms := make([]*machine.Machine, n)
	t0 := time.Now()
	for i := range ms {
		ms[i] = machine.New(DefaultSpec(), machine.Options{Effects: instant{}, Policies: &pol, Logger: quiet, Observer: observe})
		ms[i].Start()
	}
	// The window starts once every machine has started: all came up within a few
	// milliseconds of each other, as after a restart of the process that holds them.
	start.Store(time.Now().UnixNano())
	b.Logf("%d machines started in %s", n, time.Since(t0).Round(time.Millisecond))
	time.Sleep(spreadIntervals * spreadInterval)
	start.Store(0)
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() { _ = m.Close(context.Background()) })
	}
	wg.Wait()

	var ints [spreadSlices]int
	for i := range counts {
		ints[i] = int(counts[i].Load())
	}
	return peakRatio(b, ints[:], spreadInterval/100)
}
