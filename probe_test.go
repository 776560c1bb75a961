package mcpfsm

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestSparedProbesDoNotSpin: a probe spared by a recent answer (Event.Heard)
// sets the next one an interval after that answer, less a fresh jitter. When that
// jitter is larger than the last one, the next probe comes before the interval since
// the answer has passed, is spared again, and the delay left is at most zero: the
// machine goes ready → probing → ready every MinDelay (1ms) until an interval has
// passed since the answer. A connection that goes quiet after one call then takes
// hundreds of transitions, filling its history and its observer with probes, where
// one probe per interval is the schedule.
func TestSparedProbesDoNotSpin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pol := DefaultSpec().Defaults()
		pol.KeepaliveInterval = 30 * time.Second
		pol.KeepaliveJitter = 0.1
		var probes int
		c, err := Open(transport.Config{Name: "stub", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}, Options{
			Logger: quietLogger(), dial: stubDial, Policies: &pol,
			Observer: func(tr machine.Transition) {
				if tr.To == states.Probing {
					probes++
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := c.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		// A call now and then for a few intervals (each spares the probe after it),
		// then quiet for ten intervals.
		for range 6 {
			if _, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "echo"}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(7 * time.Second)
		}
		time.Sleep(10 * pol.KeepaliveInterval)
		synctest.Wait()
		total := 10*pol.KeepaliveInterval + 6*7*time.Second
		// One probe per interval, shortened by up to the jitter: at most
		// total/(interval·(1-jitter)) + 1, about 17.
		if limit := int(total/(pol.KeepaliveInterval*9/10)) + 2; probes > limit {
			t.Errorf("%d probes in %s of virtual time at a %s interval; want at most %d", probes, total, pol.KeepaliveInterval, limit)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// frozenStub is a stub session whose server can freeze: from then on a probe gets no
// answer until its context ends.
type frozenStub struct {
	stubClient
	frozen *atomic.Bool
}

func (f frozenStub) Probe(ctx context.Context) error {
	if f.frozen.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// TestFrozenAfterCallFound: a server that freezes right after answering a call
// is found by a probe within keepalive_interval + probe_timeout of that answer, spared
// probes or not (the promise of the keepalive delay).
func TestFrozenAfterCallFound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pol := DefaultSpec().Defaults()
		var frozen atomic.Bool
		var foundAt time.Time
		c, err := Open(transport.Config{Name: "stub", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}, Options{
			Logger: quietLogger(), Policies: &pol,
			dial: func(context.Context, transport.Config, transport.Options) (transport.Client, error) {
				return frozenStub{stubClient{res: &mcp.CallToolResult{}}, &frozen}, nil
			},
			Observer: func(tr machine.Transition) {
				if tr.From == states.Probing && tr.To == states.TearingDown && foundAt.IsZero() {
					foundAt = tr.At
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := c.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(pol.KeepaliveInterval / 2)
		if _, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "echo"}); err != nil {
			t.Fatal(err)
		}
		answered := time.Now()
		frozen.Store(true)
		time.Sleep(3 * pol.KeepaliveInterval)
		synctest.Wait()
		if foundAt.IsZero() {
			t.Fatalf("a frozen server was not found in %s", 3*pol.KeepaliveInterval)
		}
		if took, limit := foundAt.Sub(answered), pol.KeepaliveInterval+pol.ProbeTimeout+10*time.Millisecond; took > limit {
			t.Errorf("found %s after the last answer; want within %s", took, limit)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
