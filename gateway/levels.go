package gateway

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file sets the backends' log levels.
//
// A backend on a protocol version before 2026-07-28 takes a log level only by
// logging/setLevel, for its whole session; one on 2026-07-28 takes the level each
// request carries in its _meta. Front clients ask for levels two ways:
//
//   - A front session before 2026-07-28 sends logging/setLevel: every backend is set
//     to the most verbose level any live front session asked for (g.level), before
//     the front's request is answered.
//   - A 2026-07-28 front request carries its level in its _meta. A 2026-07-28
//     backend gets it there (forwardMeta). An older backend cannot, and is set
//     (bridgeLevel) to the most verbose level 2026-07-28 requests asked of it in the
//     last levelTTL, before the request's call is sent to it, when that is more
//     verbose than the level it has: one logging/setLevel when a request first asks
//     more, none while requests keep asking what it has. A level no request asked
//     for levelTTL is forgotten at the next sweep, and the backend set back to the
//     front sessions' level (left as it is when no front session asked one: the
//     front then lets none of its messages through anyway).
//
// Whatever the backend sends, each front request or session gets only what its own
// level lets through: the go-sdk's server filters a 2026-07-28 request's messages by
// the request's level, a session's by the session's.

// setLevel records a front session's log level and sets the backends' to the most
// verbose level any front session asked for. Backends with a session are set before
// the front's request is answered (so that the next call's messages come at the
// level); the others when they next have one.
func (g *Gateway) setLevel(ctx context.Context, ss *mcp.ServerSession, level mcp.LoggingLevel) {
	g.sessMu.Lock()
	g.levels[ss] = level
	changed := g.recomputeLevelLocked()
	g.sessMu.Unlock()
	if changed {
		g.applyLevel(ctx, g.m.Servers())
	}
}

var levelOrder = []mcp.LoggingLevel{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// levelList is levelOrder, as an error lists it.
var levelList = func() string {
	names := make([]string, len(levelOrder))
	for i, l := range levelOrder {
		names[i] = string(l)
	}
	return strings.Join(names, ", ")
}()

func levelRank(l mcp.LoggingLevel) int {
	for i, x := range levelOrder {
		if x == l {
			return i
		}
	}
	return len(levelOrder)
}

// recomputeLevelLocked sets g.level to the most verbose front level, and reports
// whether it changed. sessMu is held.
func (g *Gateway) recomputeLevelLocked() bool {
	var lv mcp.LoggingLevel
	for _, l := range g.levels {
		if lv == "" || levelRank(l) < levelRank(lv) {
			lv = l
		}
	}
	if lv == g.level {
		return false
	}
	g.level = lv
	return true
}

// applyLevel sets the backends' log level (levelFor): at once on those with a session
// (within ctx, at most 5s), in the background on the others.
func (g *Gateway) applyLevel(ctx context.Context, servers []string) {
	done := make(chan struct{}, len(servers))
	waiting := 0
	for _, name := range servers {
		c := g.m.Conn(name)
		if c == nil || g.levelFor(name, c) == "" {
			continue
		}
		set := func(ctx context.Context) {
			if err := g.levelTo(ctx, name, c); err != nil {
				g.log.Debug("mcpfsm gateway: setting a backend's log level", "server", name, "err", err)
			}
		}
		if _, up := c.Server(); up {
			waiting++
			go func() {
				defer func() { done <- struct{}{} }()
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				set(sctx)
			}()
			continue
		}
		// One waiting set per backend, whatever the number of changes meanwhile:
		// it sets the level current when the backend has a session.
		g.sessMu.Lock()
		waiting := g.levelWaits[name]
		g.levelWaits[name] = true
		g.sessMu.Unlock()
		if waiting {
			continue
		}
		if !g.spawn(func() { g.levelWhenUp(name, c) }) {
			g.sessMu.Lock()
			delete(g.levelWaits, name)
			g.sessMu.Unlock()
		}
	}
	for range waiting {
		<-done
	}
}

// levelWhenUp sets a backend's log level, the one current then, once it has a session
// (a backend whose calls fail fast, its breaker open, is tried again every
// levelRetry), unless its connection is replaced or the gateway closes first.
func (g *Gateway) levelWhenUp(name string, c *mcpfsm.Conn) {
	defer func() {
		g.sessMu.Lock()
		delete(g.levelWaits, name)
		g.sessMu.Unlock()
	}()
	for g.ctx.Err() == nil && g.m.Conn(name) == c {
		wctx, cancel := context.WithTimeout(g.ctx, levelRetry)
		err := c.WaitReady(wctx)
		cancel()
		if err == nil {
			sctx, cancel := context.WithTimeout(g.ctx, 5*time.Second)
			err = g.levelTo(sctx, name, c)
			cancel()
			if err == nil {
				return
			}
			g.log.Debug("mcpfsm gateway: setting a backend's log level", "server", name, "err", err)
		}
		t := time.NewTimer(levelRetry)
		select {
		case <-t.C:
		case <-g.ctx.Done():
			t.Stop()
		}
	}
}

// levelRetry is how often levelWhenUp looks again at a backend without a session.
const levelRetry = time.Second

// levelFor returns the level backend server (on connection c) is to have: the most
// verbose of the front sessions' and, on a backend before 2026-07-28, of those
// 2026-07-28 requests asked of it lately; "" if none.
func (g *Gateway) levelFor(server string, c *mcpfsm.Conn) mcp.LoggingLevel {
	g.sessMu.Lock()
	r := levelRank(g.level)
	g.sessMu.Unlock()
	if b := g.bridgeOf(server); b != nil {
		if info, up := c.Server(); !up || !transport.NewProtocol(info.ProtocolVersion) {
			r = min(r, b.asked(time.Now().UnixNano()))
		}
	}
	if r == len(levelOrder) {
		return ""
	}
	return levelOrder[r]
}

// levelTo sets a backend's log level to levelFor's, one set at a time per backend
// (the level computed last is the one set last), and records it (levelBridge.set).
func (g *Gateway) levelTo(ctx context.Context, server string, c *mcpfsm.Conn) error {
	release, err := g.levelTurns.Acquire(ctx, server)
	if err != nil {
		return err
	}
	defer release()
	level := g.levelFor(server, c)
	if level == "" {
		return nil
	}
	b := g.bridge(server)
	r := int32(levelRank(level))
	if r > b.set.Load() {
		// Less verbose from now on: a request that asks for more from here raises
		// it again (bridgeLevel), rather than take the level as set already; one
		// that asked between the look above and this store is seen by the look
		// below.
		b.set.Store(r)
		if level = g.levelFor(server, c); level == "" {
			return nil
		}
		r = int32(levelRank(level))
	}
	if err := c.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: level}); err != nil {
		return err
	}
	b.set.Store(r)
	return nil
}

// A levelBridge is what the gateway knows of one backend's log level: what
// 2026-07-28 requests asked of it, and what it was set to.
type levelBridge struct {
	// when holds, by level rank, when a 2026-07-28 front request last asked for
	// the level (UnixNano, to within askedGrain; 0: never).
	when [8]atomic.Int64
	// set is the rank of the level the backend was last set to, or is being set
	// to if that is less verbose (len(levelOrder): none, or not known).
	set atomic.Int32

	mu sync.Mutex
	// raising is closed when the raise under way (to raisingRank, begun at
	// raisingSince) is over; nil when none is.
	raising      chan struct{}
	raisingRank  int
	raisingSince time.Time
	// retryAt: a raise that failed is not tried again before it.
	retryAt time.Time
}

const (
	// levelTTL is how long a level a 2026-07-28 request asked of a backend before
	// 2026-07-28 is kept after the last request that asked it.
	levelTTL = 5 * time.Minute
	// askedGrain is how precisely levelBridge.when is kept: a request asking the
	// level of the one before it, within askedGrain, writes nothing.
	askedGrain = time.Second
	// raiseWait is the longest a request waits for its backend to take its level
	// (its own deadline first): it is sent then whatever the backend said.
	raiseWait = 2 * time.Second
	// raiseRetry is how long a backend that refused a level, or did not answer,
	// is not asked again for a request's.
	raiseRetry = 30 * time.Second
)

// bridgeOf returns the level bridge of a backend, nil if it has none.
func (g *Gateway) bridgeOf(server string) *levelBridge {
	if b, ok := g.bridges.Load(server); ok {
		return b.(*levelBridge)
	}
	return nil
}

// bridge returns the level bridge of a backend, made if it has none.
func (g *Gateway) bridge(server string) *levelBridge {
	if b := g.bridgeOf(server); b != nil {
		return b
	}
	nb := &levelBridge{}
	nb.set.Store(int32(len(levelOrder)))
	b, _ := g.bridges.LoadOrStore(server, nb)
	return b.(*levelBridge)
}

// ask notes that a request asked for the level of rank r at now.
func (b *levelBridge) ask(r int, now int64) {
	if w := &b.when[r]; now-w.Load() >= int64(askedGrain) {
		w.Store(now)
	}
}

// asked returns the rank of the most verbose level requests asked in the last
// levelTTL before now (len(levelOrder): none).
func (b *levelBridge) asked(now int64) int {
	for r := range b.when {
		if w := b.when[r].Load(); w != 0 && now-w < int64(levelTTL) {
			return r
		}
	}
	return len(levelOrder)
}

// bridgeLevel makes a backend before 2026-07-28 send the log messages that a
// 2026-07-28 front request asks for with its _meta (r, the level's rank:
// requestLevel), before the request goes to it: the backend is set to the level
// (with the others asked lately, see levelFor) if it has none as verbose. The
// request waits for that up to raiseWait from when the backend was asked (or its
// own end), and is sent then whatever came of it; a backend that refused or did not
// answer is not asked again for raiseRetry. A request whose level the backend has
// already costs a look at a map and two atomic loads.
func (g *Gateway) bridgeLevel(ctx context.Context, server string, c *mcpfsm.Conn, r int) {
	if r == len(levelOrder) {
		return
	}
	b := g.bridge(server)
	b.ask(r, time.Now().UnixNano())
	if int32(r) >= b.set.Load() {
		return
	}
	if info, up := c.Server(); !up || transport.NewProtocol(info.ProtocolVersion) || info.Capabilities == nil || info.Capabilities.Logging == nil {
		return // it takes the request's level in its _meta, or has no log to set
	}
	b.mu.Lock()
	ch, since := b.raising, b.raisingSince
	switch {
	case ch != nil && r >= b.raisingRank: // the raise under way gives it
	case time.Now().Before(b.retryAt):
		b.mu.Unlock()
		return
	default:
		ch, since = make(chan struct{}), time.Now()
		mine := ch
		b.raising, b.raisingRank, b.raisingSince = ch, r, since
		if !g.spawn(func() {
			defer close(mine)
			sctx, cancel := context.WithTimeout(g.ctx, 5*time.Second)
			err := g.levelTo(sctx, server, c)
			cancel()
			b.mu.Lock()
			if b.raising == mine {
				b.raising = nil
			}
			if err != nil {
				b.retryAt = time.Now().Add(raiseRetry)
			}
			b.mu.Unlock()
			if err != nil {
				g.log.Debug("mcpfsm gateway: setting a backend's log level for a request", "server", server, "level", levelOrder[r], "err", err)
			}
		}) {
			b.raising = nil
			b.mu.Unlock()
			return
		}
	}
	b.mu.Unlock()
	// Up to raiseWait from the raise's start: a backend that does not answer
	// holds each request once, not once per request for as long as it is asked.
	t := time.NewTimer(raiseWait - time.Since(since))
	defer t.Stop()
	select {
	case <-ch:
	case <-ctx.Done():
	case <-t.C:
	}
}

// forgetLevels sets back the backends whose level is more verbose than anyone asks
// now (2026-07-28 requests asked it more than levelTTL ago), and forgets the
// bridges of servers that are gone.
func (g *Gateway) forgetLevels() {
	live := map[string]bool{}
	for _, s := range g.m.Servers() {
		live[s] = true
	}
	var back []string
	g.bridges.Range(func(k, v any) bool {
		server, b := k.(string), v.(*levelBridge)
		c := g.m.Conn(server)
		if !live[server] || c == nil {
			g.bridges.Delete(server)
			return true
		}
		if lv := g.levelFor(server, c); lv != "" && int32(levelRank(lv)) > b.set.Load() {
			back = append(back, server)
		}
		return true
	})
	if len(back) > 0 {
		g.applyLevel(g.ctx, back)
	}
}

// newConns forgets what the gateway set on backends whose connection is new (a
// reload replaced or added it): they have no level yet.
func (g *Gateway) newConns(servers []string) {
	for _, s := range servers {
		if b := g.bridgeOf(s); b != nil {
			b.set.Store(int32(len(levelOrder)))
		}
	}
}
