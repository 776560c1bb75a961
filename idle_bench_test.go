package mcpfsm

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// idleMachinesFlag is how many connections BenchmarkIdleMachines and
// BenchmarkProbeSpread hold.
var idleMachinesFlag = flag.Int("idle.n", 10_000, "how many connections BenchmarkIdleMachines and BenchmarkProbeSpread hold")

// footprint is what the process holds: live heap and goroutine stacks, and goroutines.
type footprint struct {
	heap, stacks uint64
	goroutines   int
}

// measure returns the process's footprint once the garbage collector has run a few
// times: stacks shrink by half at most once per cycle, and only while mostly unused, so
// that a goroutine that once ran deep (a connect) is measured at its resting size.
func measure() footprint {
	var ms runtime.MemStats
	for range 6 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	// Return what the collections freed to the OS now, or the scavenger's
	// goroutine would do it a little at a time during the windows that follow,
	// waking thousands of times.
	debug.FreeOSMemory()
	return footprint{heap: ms.HeapAlloc, stacks: ms.StackInuse, goroutines: runtime.NumGoroutine()}
}

// wakeups counts the times goroutines of the process were woken to run, as the
// scheduler samples them (one transition in gTrackingPeriod = 8 per goroutine is
// timed into /sched/latencies:seconds; the count is scaled back up).
func wakeups() float64 {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	var n uint64
	for _, c := range s[0].Value.Float64Histogram().Counts {
		n += c
	}
	return float64(n) * 8
}

// BenchmarkIdleMachines holds *idleMachinesFlag (10,000) connections ready on
// in-memory sessions with keepalive on, and reports what the machines add beyond the
// SDK sessions themselves, measured in the same run: first as many raw go-sdk client
// sessions with their server sessions (the baseline), then the Conns. One op is the
// whole experiment; run it with -benchtime=1x.
//
// The Conns keep alive every 24 hours (-idle.keepalive): each probes first at a random
// point of its first interval, so that a window of a few seconds sees almost no probe
// and measures what the machines cost between probes; and the memory measured is not
// swollen by the garbage of probes under way (a probe of the test server lists its
// tools: some 300 KB of garbage, which a collection cycle under way keeps alive). What
// a probe costs is measured apart, on a connection of its own.
//
// Metrics:
//   - bytes/machine, goroutines/machine: the Conns' live heap and goroutine stacks, and
//     their goroutines, minus the baseline's, per connection (goals 4096 and 1).
//   - steady-bytes/machine: bytes/machine once every machine's history holds its
//     machine.DefaultHistory records, as it does after some 15 probes.
//   - wakeups/probe: goroutine wake-ups in the whole process (the machine's, the SDK's
//     on both sides of the pipe, the runtime's) that one keepalive probe takes,
//     measured on a connection of its own probing every 20ms, beside the idle
//     baseline sessions (a process as large as the fleet's: on a small heap, the
//     probes' garbage would set off collections, whose workers wake too).
//   - extra-wakeups/machine/min: wake-ups of the idle fleet beyond those its probes
//     account for (wakeups/probe each) and beyond the baseline's, per connection and
//     minute (goal 0).
//   - wakeups/machine/min: what an idle connection costs at the default keepalive
//     (30s, jitter 0.1): probes per minute × wakeups/probe, plus the extra wake-ups.
func BenchmarkIdleMachines(b *testing.B) {
	for b.Loop() {
		idleMachinesOnce(b)
	}
}

func idleMachinesOnce(b *testing.B) {
	idleMachines := *idleMachinesFlag
	ctx := context.Background()
	server := testserver.New(testserver.Options{})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	before := measure()

	// The baseline: raw SDK sessions over the same transport, with the same server.
	// Configured as transport.Dial configures its client: tool-list changes are
	// listened for, and the tool list is asked for once (the SDK keeps it).
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler:     func(context.Context, *mcp.ToolListChangedRequest) {},
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) {},
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {},
		ResourceUpdatedHandler:     func(context.Context, *mcp.ResourceUpdatedNotificationRequest) {},
		LoggingMessageHandler:      func(context.Context, *mcp.LoggingMessageRequest) {},
		CreateMessageHandler:       func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) { return nil, nil },
		ElicitationHandler:         func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, nil },
	})
	sdk := make([]*mcp.ClientSession, idleMachines)
	srv := make([]*mcp.ServerSession, idleMachines)
	lists := make([][]any, idleMachines) // what each client holds: its lists, as a Conn with list handlers does
	for i := range sdk {
		st, ct := mcp.NewInMemoryTransports()
		ss, err := server.Connect(ctx, st, nil)
		if err != nil {
			b.Fatal(err)
		}
		cs, err := client.Connect(ctx, ct, nil)
		if err != nil {
			b.Fatal(err)
		}
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		prompts, err := cs.ListPrompts(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		resources, err := cs.ListResources(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		templates, err := cs.ListResourceTemplates(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		lists[i] = []any{tools.Tools, prompts.Prompts, resources.Resources, templates.ResourceTemplates}
		sdk[i], srv[i] = cs, ss
	}
	base := measure()
	heapProfile(b, "sdk")
	w0 := wakeups()
	time.Sleep(idleWindow)
	sdkWake := wakeups() - w0
	// One probe on its own, in a process as large as the fleet's and as quiet.
	solo := soloProbeWakeups(b, transport.Config{Name: "solo", InMemory: &transport.InMemory{Server: server}}, quiet)
	for i := range sdk {
		_ = sdk[i].Close()
		_ = srv[i].Wait()
	}
	clear(sdk)
	clear(srv)
	clear(lists)
	after := measure()

	// The machines. Each probes first at a uniformly random point of its first
	// interval.
	pol := DefaultSpec().Defaults()
	pol.KeepaliveInterval = *idleKeepaliveFlag
	var probes atomic.Int64
	cfg := transport.Config{Name: "idle", InMemory: &transport.InMemory{Server: server}}
	opts := Options{Policies: &pol, Logger: quiet, Handlers: everyHandler(), Observer: func(tr machine.Transition) {
		if tr.To == states.Probing {
			probes.Add(1)
		}
	}}
	// One SDK client for all, as a Manager shares one among connections whose
	// handlers advertise the same.
	opts.client = newSDKClient(nil, kindOf(&opts.Handlers, false))
	t0 := time.Now()
	conns := openConns(b, idleMachines, cfg, opts)
	b.Logf("opened %d connections in %s", idleMachines, time.Since(t0).Round(time.Millisecond))
	ours := measure()
	heapProfile(b, "machine")
	// Each transition adds a record to the machine's history until it holds
	// machine.DefaultHistory: an idle machine gets there after some 15 probes.
	records := 0
	for _, c := range conns {
		records += len(c.History())
	}
	growth := float64(machine.DefaultHistory*historyRecord) - float64(records*historyRecord)/float64(len(conns))

	p0, w0 := probes.Load(), wakeups()
	time.Sleep(idleWindow)
	nprobes, wake := probes.Load()-p0, wakeups()-w0

	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { _ = c.Close(ctx) })
	}
	wg.Wait()

	n := float64(idleMachines)
	minutes := idleWindow.Minutes()
	sdkBytes := float64(base.heap+base.stacks) - float64(before.heap+before.stacks)
	ourBytes := float64(ours.heap+ours.stacks) - float64(after.heap+after.stacks)
	b.Logf("baseline: %.0f bytes/session (heap %.0f, stacks %.0f), %.2f goroutines/session, %.2f wakeups/session/min",
		sdkBytes/n, (float64(base.heap)-float64(before.heap))/n, (float64(base.stacks)-float64(before.stacks))/n,
		float64(base.goroutines-before.goroutines)/n, sdkWake/n/minutes)
	b.Logf("machines: %.0f bytes/conn (heap %.0f, stacks %.0f), %.2f goroutines/conn",
		ourBytes/n, (float64(ours.heap)-float64(after.heap))/n, (float64(ours.stacks)-float64(after.stacks))/n,
		float64(ours.goroutines-after.goroutines)/n)
	extra := (wake - float64(nprobes)*solo - sdkWake) / n / minutes
	b.Logf("idle window %s, keepalive %s: %d probes, %.0f wakeups (one probe alone: %.1f); beyond the probes' own: %.3f/machine/min",
		idleWindow, *idleKeepaliveFlag, nprobes, wake, solo, extra)

	def := DefaultSpec().Defaults()
	probesPerMin := time.Minute.Seconds() / (def.KeepaliveInterval.Seconds() * (1 - def.KeepaliveJitter/2))
	b.ReportMetric((ourBytes-sdkBytes)/n, "bytes/machine")
	b.ReportMetric(((float64(ours.stacks)-float64(after.stacks))-(float64(base.stacks)-float64(before.stacks)))/n, "stack-bytes/machine")
	b.ReportMetric(sdkBytes/n, "sdk-bytes/session")
	b.ReportMetric((ourBytes-sdkBytes)/n+growth, "steady-bytes/machine")
	b.ReportMetric(float64((ours.goroutines-after.goroutines)-(base.goroutines-before.goroutines))/n, "goroutines/machine")
	b.ReportMetric(solo, "wakeups/probe")
	b.ReportMetric(extra, "extra-wakeups/machine/min")
	b.ReportMetric(probesPerMin*solo+max(0, extra), "wakeups/machine/min")
	b.ReportMetric(0, "ns/op")
}

// everyHandler returns Handlers with every field set (to handlers that do nothing):
// what an idle connection costs with all it can listen for.
func everyHandler() Handlers {
	return Handlers{
		CreateMessage:       func(context.Context, *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) { return nil, nil },
		Elicit:              func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error) { return nil, nil },
		ElicitationComplete: func(context.Context, *mcp.ElicitationCompleteParams) {},
		LoggingMessage:      func(context.Context, *mcp.LoggingMessageParams) {},
		Progress:            func(context.Context, *mcp.ProgressNotificationParams) {},
		ResourceUpdated:     func(context.Context, *mcp.ResourceUpdatedNotificationParams) {},
		ToolsChanged:        func([]*mcp.Tool) {},
		PromptsChanged:      func([]*mcp.Prompt) {},
		ResourcesChanged:    func([]*mcp.Resource, []*mcp.ResourceTemplate) {},
	}
}

// soloProbeWakeups returns how many goroutine wake-ups one keepalive probe takes, with
// a single connection probing every 20ms.
func soloProbeWakeups(b *testing.B, cfg transport.Config, log *slog.Logger) float64 {
	debug.FreeOSMemory() // see measure
	pol := DefaultSpec().Defaults()
	pol.KeepaliveInterval = 20 * time.Millisecond
	var probes atomic.Int64
	c, err := Open(cfg, Options{Policies: &pol, Logger: log, Observer: func(tr machine.Transition) {
		if tr.To == states.Probing {
			probes.Add(1)
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	if err := c.WaitReady(context.Background()); err != nil {
		b.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	p0, w0 := probes.Load(), wakeups()
	time.Sleep(time.Second)
	return (wakeups() - w0) / float64(max(1, probes.Load()-p0))
}

// openConns opens n connections, a batch at a time (all at once, the connects would
// outlast their timeout on a small machine), and waits until each is ready.
func openConns(b *testing.B, n int, cfg transport.Config, opts Options) []*Conn {
	ctx := context.Background()
	conns := make([]*Conn, n)
	const batch = 64
	for i := 0; i < n; i += batch {
		for j := i; j < min(n, i+batch); j++ {
			c, err := Open(cfg, opts)
			if err != nil {
				b.Fatal(err)
			}
			conns[j] = c
		}
		for _, c := range conns[i:min(n, i+batch)] {
			if err := c.WaitReady(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	return conns
}

var idleHeapProfile = flag.String("idle.heapprofile", "", "write heap profiles of BenchmarkIdleMachines to `prefix`-sdk and prefix-machine")

func heapProfile(b *testing.B, name string) {
	if *idleHeapProfile == "" {
		return
	}
	f, err := os.Create(*idleHeapProfile + "-" + name)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// historyRecord is the size of a record of a machine's history (machine/history.go).
const historyRecord = 40

// idleWindow is how long the idle fleet is watched for wake-ups.
const idleWindow = 5 * time.Second

var idleKeepaliveFlag = flag.Duration("idle.keepalive", 24*time.Hour, "the keepalive interval of BenchmarkIdleMachines's connections (0 turns probing off)")
