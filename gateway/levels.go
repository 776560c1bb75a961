package gateway

import (
	"context"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file sets the backends' log levels.

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

// applyLevel sets the backends' log level: at once on those with a session (within
// ctx, at most 5s), in the background on the others.
func (g *Gateway) applyLevel(ctx context.Context, servers []string) {
	g.sessMu.Lock()
	level := g.level
	g.sessMu.Unlock()
	if level == "" {
		return
	}
	done := make(chan struct{}, len(servers))
	waiting := 0
	for _, name := range servers {
		c := g.m.Conn(name)
		if c == nil {
			continue
		}
		set := func(ctx context.Context) {
			if err := c.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: level}); err != nil {
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
			g.sessMu.Lock()
			level := g.level
			g.sessMu.Unlock()
			sctx, cancel := context.WithTimeout(g.ctx, 5*time.Second)
			err = c.SetLoggingLevel(sctx, &mcp.SetLoggingLevelParams{Level: level})
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
