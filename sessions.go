package mcpfsm

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file is the half of a Conn that owns its sessions: the invoked effects of the
// lifecycle (effects.Effects), which open, check and close sessions on the machine's
// owner, one at a time. Other goroutines (a session's end, a call that finds its
// session broken) only report to the machine; calls read the current session.

// A session is one live SDK session of a Conn, as calls see it.
type session struct {
	id   uint64 // unique within its Conn, from 1
	conn *Conn
	s    transport.Client
	// settler is s, if it can wait for the notifications sent before its answers
	// to be handled (transport.Session.Settle).
	settler settler
	start   time.Time
	// stateless: the server keeps no session (streamable HTTP on protocol
	// 2026-07-28): what a request carries in its _meta is all it knows.
	stateless bool
	// deaf: the server ended a listen it had agreed to (see listenLost); its
	// error.
	deaf atomic.Pointer[error]

	reported atomic.Bool  // a failure of this session has been reported to the machine
	closing  atomic.Bool  // closeNow has begun: a call's error from now on is our own close's
	inflight atomic.Int64 // requests of ours in flight on it: calls, and re-lists
	draining atomic.Bool  // no new call may start on it
	drained  chan struct{}
	answered atomic.Int64 // UnixNano of the last answer a caller's request got on it
	proved   atomic.Bool  // an answer proved the connection healthy (see answeredOn)

	tools     relister[[]*mcp.Tool]
	prompts   relister[[]*mcp.Prompt]
	resources relister[resourceList]

	// updates runs the handler of the updates a new session reports once (see
	// restoreAndSwap); endUpdates cancels its context. Both belong to the owner,
	// which ends them when it closes the session (closeNow).
	updates    sync.WaitGroup
	endUpdates context.CancelFunc

	// life ends as the session is closed (closeNow), before the close itself:
	// every call on it runs under a context that ends with it (see callPath), so
	// that the calls still in flight are cancelled, and their server told, rather
	// than cut by the close (see cutCalls). The handlers answering a 2026-07-28
	// server's input requests during a call end with the call (see fulfil), as a
	// request's of the server's do on earlier versions.
	life    context.Context
	endLife context.CancelFunc
}

// A settler waits until the notifications a server sent before the answers
// received so far have been handled.
type settler interface{ Settle(ctx context.Context) }

// resourceList is a server's resources and resource templates, listed together: a
// resources/list_changed notification may concern either.
type resourceList struct {
	resources []*mcp.Resource
	templates []*mcp.ResourceTemplate
}

// sessionKey keys the session in the context given to Dial, which the SDK hands on to
// every handler of the session's notifications and requests: that is how a shared
// SDK client finds the connection a message came for.
type sessionKey struct{}

func sessionFrom(ctx context.Context) *session {
	s, _ := ctx.Value(sessionKey{}).(*session)
	return s
}

// release ends a call counted by tryAcquire.
func (c *Conn) release(s *session) {
	if s.inflight.Add(-1) == 0 && s.draining.Load() {
		select {
		case s.drained <- struct{}{}:
		default:
		}
	}
}

// tryAcquire returns the current session with a call counted in flight on it, or nil
// if there is none or it is being torn down. The caller must release it.
func (c *Conn) tryAcquire() *session {
	s := c.current.Load()
	if s == nil {
		return nil
	}
	s.inflight.Add(1)
	// Counted before looking again: a teardown that stored nil and set draining
	// after this either sees the count and waits, or is seen here.
	if s.draining.Load() || c.current.Load() != s {
		c.release(s)
		return nil
	}
	return s
}

// ownClose reports whether an error a call got on s now is an artifact of our own
// close: s is being closed, and not because it failed (a failure was reported, by the
// session's end, a probe or a call, before the teardown it set off).
func (s *session) ownClose() bool { return s.closing.Load() && !s.reported.Load() }

// report tells the machine that s is broken, with the cause the classifier gave err.
// Only the first report of a session is posted; only a cause that counts is a report.
func (c *Conn) report(s *session, cause states.Cause, err error) {
	if !cause.Counts() || !s.reported.CompareAndSwap(false, true) {
		return
	}
	c.m.Post(machine.Event{Trigger: states.Lost, Cause: cause, Err: err, Session: s.id})
}

// lifecycle is the side of a Conn that its machine drives: it implements
// effects.Effects, whose methods the machine's owner calls, one at a time. (A type of
// its own, so that the effects are not methods of the exported Conn.)
type lifecycle Conn

var _ effects.Effects = (*lifecycle)(nil)

// Connect opens the connection's first session, or its next after a teardown.
func (l *lifecycle) Connect(ctx context.Context, inv machine.Invocation) machine.Event {
	return (*Conn)(l).connect(ctx, inv)
}

// Replace opens a session while the current one serves (make before break); connect
// leaves the one it replaces for Retire. If it fails, a current session that is deaf
// (its server ended a listen: see listenLost) cannot serve on.
func (l *lifecycle) Replace(ctx context.Context, inv machine.Invocation) machine.Event {
	c := (*Conn)(l)
	ev := c.connect(ctx, inv)
	if ev.Trigger == states.ConnectFailed && !errors.Is(context.Cause(ctx), machine.ErrClosed) {
		c.dropDeaf() // (Close tears the session down anyway: calls cut by it are its artifacts)
	}
	return ev
}

// Probe, Teardown and Retire: see the Conn methods of the same names in lower case.
func (l *lifecycle) Probe(ctx context.Context, inv machine.Invocation) machine.Event {
	return (*Conn)(l).probe(ctx, inv)
}

// Teardown closes the live session.
func (l *lifecycle) Teardown(ctx context.Context, inv machine.Invocation) machine.Event {
	return (*Conn)(l).teardown(ctx, inv)
}

// Retire closes the replaced session.
func (l *lifecycle) Retire(ctx context.Context, inv machine.Invocation) machine.Event {
	return (*Conn)(l).retire(ctx, inv)
}

// connect dials, initializes, lists what is listened for and restores the session
// state, then makes the new session the one calls use. A live session it replaces is
// left for retire.
func (c *Conn) connect(ctx context.Context, inv machine.Invocation) machine.Event {
	v := c.cfg.Load()
	c.nextID++
	s := &session{id: c.nextID, conn: c, drained: make(chan struct{}, 1)}
	s.life, s.endLife = context.WithCancel(context.Background())
	start := time.Now()
	ev := c.open(context.WithValue(ctx, sessionKey{}, s), inv, v.cfg, s)
	c.last.Store(&attempt{gen: v.gen, err: ev.Err})
	id := ""
	if ev.Trigger == states.Connected {
		id = s.s.ID()
	}
	c.tel.connected(inv, start, ev, id)
	return ev
}

func (c *Conn) open(ctx context.Context, inv machine.Invocation, cfg transport.Config, s *session) machine.Event {
	topts := transport.Options{
		MCPClient:     c.client,
		Logger:        c.opts.Logger,
		OnEnd:         func(err error) { c.report(s, endCause(err), err) },
		OnListenEnded: func(err error) { c.listenLost(s, err) },
	}
	if inv.Timeout > 0 {
		topts.Deadline = inv.Now.Add(inv.Timeout) // the effect's context says only that it ended
	}
	ts, err := c.opts.dial(ctx, cfg, topts)
	if err != nil {
		return c.connectFailed(ctx, inv, err)
	}
	s.s, s.start = ts, time.Now()
	s.settler, _ = ts.(settler)
	if r := ts.InitializeResult(); r != nil && cfg.Kind() == transport.KindHTTP {
		s.stateless = transport.NewProtocol(r.ProtocolVersion)
	}
	if c.opts.onOpen != nil {
		c.opts.onOpen(s)
	}
	lists, err := c.list(ctx, s)
	if err == nil {
		err = c.restoreAndSwap(ctx, s, lists)
	}
	if err != nil {
		ev := c.connectFailed(ctx, inv, err)
		c.closeNow(ctx, s, false)
		return ev
	}
	return machine.Event{Trigger: states.Connected, Session: s.id}
}

// connectFailed is the outcome of a connect that failed with err. A server that
// answered the handshake or the restore with an error, or with something that is not
// MCP, failed the connect all the same: that is a protocol failure, and it counts.
func (c *Conn) connectFailed(ctx context.Context, inv machine.Invocation, err error) machine.Event {
	cause, err := effects.ClassifyEffect(ctx, inv, err, false)
	if cause == states.CauseServer {
		cause, err = states.CauseProtocol, &handshakeError{err}
	}
	return machine.Event{Trigger: states.ConnectFailed, Cause: cause, Err: err}
}

// handshakeError is a server's error answer that failed a connect.
type handshakeError struct{ err error }

func (e *handshakeError) Error() string { return "the server failed the handshake: " + e.err.Error() }
func (e *handshakeError) Unwrap() error { return e.err }

// listing is what a connect listed of a new session: prompts and resources only
// if their handler is set (see list).
type listing struct {
	tools     []*mcp.Tool
	prompts   []*mcp.Prompt
	resources *resourceList
}

// list lists the new session's tools, and its prompts and resources if someone listens
// for them (a handler is set). A server without prompts (resources) has none: an
// empty list, delivered as any change is (a restarted server may have dropped them).
func (c *Conn) list(ctx context.Context, s *session) (listing, error) {
	var l listing
	tools, err := s.s.ListTools(ctx)
	if err != nil {
		return l, err
	}
	l.tools = tools
	caps := serverCaps(s)
	if c.hs.PromptsChanged != nil {
		l.prompts = []*mcp.Prompt{}
		if caps.Prompts != nil {
			if l.prompts, err = listAll(ctx, s, "prompts/list", listPromptsPage); err != nil {
				return l, err
			}
		}
	}
	if c.hs.ResourcesChanged != nil {
		l.resources = &resourceList{}
		if caps.Resources != nil {
			rl, err := listResources(ctx, s)
			if err != nil {
				return l, err
			}
			l.resources = &rl
		}
	}
	return l, nil
}

// serverCaps returns what the server of s said it can do.
func serverCaps(s *session) *mcp.ServerCapabilities {
	if r := s.s.InitializeResult(); r != nil && r.Capabilities != nil {
		return r.Capabilities
	}
	return &mcp.ServerCapabilities{}
}

// restoreAndSwap re-establishes on s what the user established on the connection's
// sessions (the log level, the resource subscriptions), then makes s the session calls
// use and delivers its lists, if they changed, to the handlers. The restore and the swap
// happen under the session state's lock, so that a change the user makes meanwhile is
// either restored here or, once recorded after the swap, followed up on s (see
// Conn.changeState); the delivery comes after, outside it. After
// a reconnect, every subscribed resource is reported updated once: an update may have
// been missed while no session was up.
func (c *Conn) restoreAndSwap(ctx context.Context, s *session, l listing) error {
	// The restore runs without stateMu, so that a Subscribe or SetLoggingLevel
	// answered meanwhile is not held past its context; the swap takes it, and finds
	// out from the version whether the state changed during the restore. If it did,
	// the change is restored too (the difference only); after a few rounds the last
	// holds the record gate (see lockRecord), so that a busy user cannot starve the
	// swap: a change answered meanwhile waits to be recorded, with its context.
	var given sessionState // what s has been given so far
	var subs, refused []string
	gated := false
	defer func() {
		if gated {
			<-c.recordGate
		}
	}()
	for round := 0; ; round++ {
		if round == restoreRounds {
			select {
			case c.recordGate <- struct{}{}:
				gated = true
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		c.stateMu.Lock()
		want := sessionState{c.level, c.subscribedLocked()}
		ver := c.stateVer
		c.stateMu.Unlock()
		no, err := c.restore(ctx, s, given, want)
		if err != nil {
			return err
		}
		given, subs, refused = want, want.subs, append(refused, no...)
		c.stateMu.Lock()
		if c.stateVer != ver && !gated {
			c.stateMu.Unlock()
			continue
		}
		break // stateMu is held
	}
	if len(refused) > 0 {
		// The server refused them (the resources are gone): they are not kept,
		// and the one ResourceUpdated below tells the handler to look again.
		c.subs = slices.DeleteFunc(c.subs, func(uri string) bool { return slices.Contains(refused, uri) })
		c.stateVer++
	}
	s.tools.items.Store(&l.tools)
	if c.hs.PromptsChanged != nil { // listed (nil: none)
		s.prompts.items.Store(&l.prompts)
	}
	if l.resources != nil {
		s.resources.items.Store(l.resources)
	}
	old := c.current.Swap(s)
	c.stateMu.Unlock()
	if gated {
		gated = false
		<-c.recordGate // a change recorded from here on is sent on s too
	}
	// The handlers are the user's: they run without stateMu, so that one may read
	// the connection (Subscriptions, Roots). A re-list of the old session delivers
	// under listMu only while it is current: from here on, none delivers after these.
	c.listMu.Lock()
	c.deliverTools(l.tools)
	if c.hs.PromptsChanged != nil {
		c.deliverPrompts(l.prompts)
	}
	if l.resources != nil {
		c.deliverResources(*l.resources)
	}
	c.listMu.Unlock()
	if old != nil {
		// Make before break: calls move to the new session now; the old one
		// finishes those in flight and is closed by retire (or teardown).
		old.draining.Store(true)
		old.tools.close()
		old.prompts.close()
		old.resources.close()
		c.closeRetired(ctx, false) // one that a spec without retire left open
		c.retired = old
	}
	for _, r := range []interface{ start(*Conn, *session) }{&s.tools, &s.prompts, &s.resources} {
		r.start(c, s) // for a change that came while connecting
	}
	if h := c.hs.ResourceUpdated; (s.id > 1 || c.resumed) && h != nil && len(subs) > 0 {
		// Off the owner: the natural handler reads the resource again through the
		// connection, and that read may need the owner (to replace a session that
		// broke under it), which must not be waiting for the handler.
		// Its context ends when the session is closed; a close for good waits for
		// it (see closeNow).
		hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		s.endUpdates = cancel
		s.updates.Go(func() {
			defer cancel()
			for _, uri := range subs {
				if hctx.Err() != nil {
					return
				}
				safely(c, func() { h(hctx, &mcp.ResourceUpdatedNotificationParams{URI: uri}) })
			}
		})
	}
	return nil
}

// sessionState is what a restore gives a session: the log level and subscriptions.
type sessionState struct {
	level mcp.LoggingLevel
	subs  []string
}

// restoreRounds is how many times a restore starts over for a state that changed
// while it ran before its last round holds the lock.
const restoreRounds = 3

// restore gives s the session state want, knowing it has given already: it sets the
// level if it changed, subscribes to what is new and unsubscribes from what is gone.
// It returns the subscriptions the server refused: a server that answers a
// re-subscribe with an error (the resource is gone from a restarted server) does not
// keep the connection down for it. A level the server refuses is logged and kept, for
// the next session. Any other failure is the new session's: it does not become the one
// calls use.
func (c *Conn) restore(ctx context.Context, s *session, given, want sessionState) (refused []string, err error) {
	if want.level != "" && want.level != given.level {
		err := setLevel(ctx, s, "logging/setLevel", want.level)
		switch {
		case refusal(err):
			c.opts.Logger.Warn("mcpfsm: the new session refused the log level; it keeps the server's", "server", c.name, "level", string(want.level), "error", err)
		case err != nil:
			return nil, &restoreError{what: fmt.Sprintf("log level %q", want.level), err: err}
		}
	}
	var added, gone []string
	for _, uri := range want.subs {
		if !slices.Contains(given.subs, uri) {
			added = append(added, uri)
		}
	}
	for _, uri := range given.subs {
		if !slices.Contains(want.subs, uri) {
			gone = append(gone, uri)
		}
	}
	var mu sync.Mutex
	if err := forEachLimit(ctx, added, restoreParallel, func(ctx context.Context, uri string) error {
		err := s.s.Subscribe(ctx, uri)
		switch {
		case refusal(err):
			c.opts.Logger.Warn("mcpfsm: the new session refused a subscription; it is dropped", "server", c.name, "uri", uri, "error", err)
			mu.Lock()
			refused = append(refused, uri)
			mu.Unlock()
		case err != nil:
			return &restoreError{what: fmt.Sprintf("subscription to %q", uri), err: err}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return refused, forEachLimit(ctx, gone, restoreParallel, func(ctx context.Context, uri string) error {
		err := s.s.Unsubscribe(ctx, uri)
		if err != nil && !refusal(err) { // refused: it is not subscribed there either
			return &restoreError{what: fmt.Sprintf("cancelled subscription to %q", uri), err: err}
		}
		return nil
	})
}

// refusal reports whether err is the server's error answer to a request (not a
// failure to get one, nor a refusal of our credentials), or says that no session
// would take the request (a subscription without a URI, which a server before
// 2026-07-28 may have accepted, on a session of 2026-07-28).
func refusal(err error) bool {
	if err == nil {
		return false
	}
	c := effects.Classify(err, false)
	return c == states.CauseServer || c == states.CauseRequest
}

// restoreParallel is how many subscriptions a restore sends at once.
const restoreParallel = 8

// restoreError is a failure to restore part of the session state on a new session.
type restoreError struct {
	what string
	err  error
}

func (e *restoreError) Error() string { return "restoring the " + e.what + ": " + e.err.Error() }
func (e *restoreError) Unwrap() error { return e.err }

// forEachLimit runs fn on every item, at most n at once, and returns the first error
// (the others stop once they see ctx end).
func forEachLimit[T any](ctx context.Context, items []T, n int, fn func(context.Context, T) error) error {
	if len(items) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		sem   = make(chan struct{}, n)
	)
	for _, it := range items {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(ctx, it); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = context.Cause(ctx)
	}
	return first
}

// probe checks the live session with a request that reaches the server, unless a
// caller's request got an answer on it within the keepalive interval (traffic proves
// the server alive); if it answered, a session older than max_session_age is recycled.
// The check comes first even then: a session whose replacement cannot be opened serves
// on, and must still be found dead if its server dies.
func (c *Conn) probe(ctx context.Context, inv machine.Invocation) machine.Event {
	s := c.current.Load()
	if s == nil {
		return machine.Event{Trigger: states.ProbeFailed, Cause: states.CauseLost, Err: errNoSession}
	}
	if s.deaf.Load() != nil {
		// s is deaf (see listenLost), and no reconnect has replaced it: one is
		// asked for now.
		return machine.Event{Trigger: states.Recycle, Session: s.id}
	}
	healthy := machine.Event{Trigger: states.ProbeOK, Session: s.id}
	if age := inv.Policies.MaxSessionAge; age > 0 && time.Since(s.start) >= age {
		healthy.Trigger = states.Recycle
	}
	// Spared only if the answer came within the interval less its jitter: the next
	// probe, due an interval less a fresh jitter after that answer, then comes at
	// least that long after it and is not spared again by the same answer (with the
	// whole interval as the bar, it could be, with a delay left of at most zero, and
	// so again every millisecond until the interval had passed).
	every := inv.Policies.KeepaliveInterval
	if heard := time.Since(time.Unix(0, s.answered.Load())); every > 0 && heard < every-time.Duration(inv.Policies.KeepaliveJitter*float64(every)) {
		// A caller's request was answered within the interval: the server is alive,
		// as of then. The next probe is due an interval after that answer, so that a
		// server that froze since is found as soon as an unspared probe would find it.
		healthy.Heard = heard
		return healthy
	}
	start := time.Now()
	err := s.s.Probe(ctx)
	if err == nil {
		c.ok.note(time.Now(), true)
		c.tel.probed(start, "ok")
		return healthy
	}
	cause, err := effects.ClassifyEffect(ctx, inv, err, false)
	c.tel.probed(start, cause.String())
	if cause == states.CauseServer {
		// The server answered, with an error: the connection works.
		return healthy
	}
	s.reported.Store(true) // the probe reports it; calls need not
	return machine.Event{Trigger: states.ProbeFailed, Cause: cause, Err: err, Session: s.id}
}

var errNoSession = errors.New("no session")

// listenLost: the server of s ended a subscriptions/listen stream it had agreed to
// (over streamable HTTP on protocol 2026-07-28, where the server keeps no session:
// a restarted server holds none of them, a proxy may have cut one). It no longer
// holds those subscriptions, or sends those changed lists: s is deaf. A planned
// reconnect gives a new session them again (and reports each resource updated once),
// while s serves on and its calls finish; should that reconnect fail (the server is
// down), s is dropped (dropDeaf), and the connection reconnects as after any failure.
// Should the machine ignore that reconnect (it was tearing s down already), a probe of
// a deaf s asks again. A session that a newer one has replaced already (it drains its
// calls) needs nothing.
func (c *Conn) listenLost(s *session, err error) {
	s.deaf.Store(&err)
	if cur := c.current.Load(); cur != nil && cur.id > s.id {
		return // a newer session (listening on its own) has replaced s, which drains
	}
	c.opts.Logger.Warn("mcpfsm: the server ended a subscription stream; reconnecting to listen again", "server", c.name, "error", err)
	c.m.Reconnect()
}

// dropDeaf: a reconnect that was to replace the current session failed. If that
// session is deaf (see listenLost), it has lost what it was opened with and cannot
// serve on: it is reported lost, without a cause that counts (the failed connect has
// counted the one failure), and the connection reconnects as after any failure. It
// used to serve on until a probe failed it, which counted that failure twice, and
// without probes (keepalive_interval 0) for good.
func (c *Conn) dropDeaf() {
	s := c.current.Load()
	if s == nil {
		return
	}
	if p := s.deaf.Load(); p != nil && s.reported.CompareAndSwap(false, true) {
		c.m.Post(machine.Event{Trigger: states.Lost, Err: *p, Session: s.id})
	}
}

// endCause classifies the error a session ended with by itself. Whatever it says, the
// session is gone: an end that classifies as no failure that counts (a server or
// protocol error, a clean exit) is still the transport lost, or the machine would wait
// for a probe or a call to find out.
func endCause(err error) states.Cause {
	if c := effects.Classify(err, false); c.Counts() {
		return c
	}
	return states.CauseLost
}

// retire closes the session Replace replaced, once the calls in flight on it have
// finished: it waits for them for the effect's timeout (drain_timeout in the default
// lifecycle) less what the close needs (teardown_timeout, or half the timeout if that
// is less), then closes the session. Like a planned teardown's, its error counts only
// if it holds a real failure.
func (c *Conn) retire(ctx context.Context, inv machine.Invocation) machine.Event {
	s := c.retired
	c.retired = nil
	if s == nil {
		return machine.Event{Trigger: states.Retired}
	}
	closing := min(inv.Policies.TeardownTimeout, inv.Timeout/2)
	drain(ctx, s, inv.Timeout-closing)
	// The close has its share of the time, as a teardown has: a server that hangs in
	// close is forced at that deadline (reported as our own, as the effect's is).
	cctx, cancel := context.WithTimeoutCause(ctx, closing, machine.ErrEffectTimeout)
	defer cancel()
	cause, err := effects.CloseOutcome(cctx, inv, c.closeNow(cctx, s, inv.Vars.Closing))
	return machine.Event{Trigger: states.Retired, Cause: cause, Err: err}
}

// closeRetired closes the session connect replaced at once, if retire has not (final:
// see closeNow).
func (c *Conn) closeRetired(ctx context.Context, final bool) {
	if s := c.retired; s != nil {
		c.retired = nil
		_ = c.closeNow(ctx, s, final)
	}
}

// drain waits, for up to d or until ctx ends, for the calls in flight on s to finish.
// s is draining: no new call starts on it.
func drain(ctx context.Context, s *session, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for s.inflight.Load() > 0 && ctx.Err() == nil {
		select {
		case <-s.drained:
		case <-ctx.Done():
		}
	}
}

// teardown closes the current session, and the session it replaced if that one has
// not been retired (Close came first). A planned teardown first lets the calls in
// flight finish (for up to half of teardown_timeout) while new calls wait for the next
// session. Its error counts only if the teardown was planned and the error holds a real
// failure: after a failure, the failure was counted when it was found.
func (c *Conn) teardown(ctx context.Context, inv machine.Invocation) machine.Event {
	c.closeRetired(ctx, inv.Vars.Closing)
	s := c.current.Swap(nil)
	if s == nil {
		return machine.Event{Trigger: states.TornDown}
	}
	s.draining.Store(true)
	if inv.Vars.Planned {
		drain(ctx, s, inv.Policies.TeardownTimeout/2)
	}
	cause, err := effects.CloseOutcome(ctx, inv, c.closeNow(ctx, s, inv.Vars.Closing))
	if !inv.Vars.Planned && cause != states.CauseNone {
		cause = states.CauseArtifact // the failure behind this teardown was counted already
	}
	return machine.Event{Trigger: states.TornDown, Cause: cause, Err: err}
}

// closeNow closes s under ctx and waits for its re-lists to end. The handler of the
// updates s reported once (see restoreAndSwap) has its context ended first; a close
// for good (final: Close was asked for) also waits for it, within ctx, so that no
// handler of the connection's runs once Close has returned. Other closes do not: the
// owner, which must not wait for a handler, is on its way to the next session.
func (c *Conn) closeNow(ctx context.Context, s *session, final bool) error {
	if c.opts.onClose != nil {
		c.opts.onClose(s)
	}
	if s.endUpdates != nil {
		s.endUpdates()
	}
	s.tools.close()
	s.prompts.close()
	s.resources.close()
	cutCalls(ctx, s)
	err := s.s.Close(ctx)
	s.tools.wait()
	s.prompts.wait()
	s.resources.wait()
	if final && s.endUpdates != nil {
		ended := make(chan struct{})
		go func() { s.updates.Wait(); close(ended) }()
		select {
		case <-ended:
		case <-ctx.Done(): // a handler that ignores its context is left to itself
		}
	}
	return err
}

// cutCalls cancels the calls (and re-lists) still in flight on s, which is being
// closed (a teardown, a retirement past its drain window, Close, a Manager's reload
// removing or replacing the server), and waits for them to return, up to cutGrace within ctx: the go-sdk
// then tells the server that each is cancelled (notifications/cancelled; over
// streamable HTTP on 2026-07-28, the call's POST aborted), and the session's close
// waits for those notifications to be written before it closes the connection (see
// transport's pendingCancels). Closed under them instead, the calls were broken and
// the server never told: one over streamable HTTP ran on, and on 2025-11-25 held the
// close (its DELETE) for its whole bound. Their callers get errCut, an artifact of our
// own close, as a call broken by the close was.
func cutCalls(ctx context.Context, s *session) {
	s.closing.Store(true) // before the cut: a call it ends is our own close's (ownClose)
	s.draining.Store(true)
	if s.endLife != nil {
		s.endLife()
	}
	drain(ctx, s, cutGrace)
}

// cutGrace bounds how long a close waits for the calls it cancelled to return. They
// return as soon as the go-sdk sees their contexts end, unless it is stuck in one of
// its own locks (a write to a stdio server that reads nothing): then the close goes on
// without them.
const cutGrace = time.Second

// errCut is the error of a request that was in flight on a session when the session
// was closed (see cutCalls): the request was cancelled, and the server told, before
// the close. It wraps mcp.ErrConnectionClosed, as the error of a request cut by the
// close itself did.
var errCut = fmt.Errorf("%w: the session was closed with the request in flight (it was cancelled on the server)", mcp.ErrConnectionClosed)

// errBroken is errCut for a session closed because it broke (its server gone, a
// probe unanswered: a failure reported first), which may not hear of the cancel: the
// request was in flight when the session broke.
var errBroken = fmt.Errorf("%w: the session broke with the request in flight", mcp.ErrConnectionClosed)

// A relister re-lists one kind of a session's list (tools, prompts, resources) after
// the server says it changed, coalescing bursts: one re-list at a time, and one more
// after it if a notification came meanwhile. Re-lists start only while the session is
// open for them: from the end of connect (whose own listing comes first) to the start
// of its close, which then waits for them. A notification before connect has listed
// just marks the list dirty.
type relister[T any] struct {
	items atomic.Pointer[T]

	mu      sync.Mutex
	open    bool // re-lists may start
	running bool // a re-list goroutine is running
	dirty   bool // a notification came since the last listing began
	wg      sync.WaitGroup
}

// changed records a list_changed notification and starts a re-list if one is due.
func (r *relister[T]) changed(c *Conn, s *session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dirty = true
	r.startLocked(c, s)
}

// start opens the session for re-lists, and starts one for a change that came while
// connecting.
func (r *relister[T]) start(c *Conn, s *session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.open = true
	r.startLocked(c, s)
}

func (r *relister[T]) startLocked(c *Conn, s *session) {
	if r.dirty && r.open && !r.running {
		r.running = true
		r.wg.Add(1)
		go r.loop(c, s)
	}
}

// close stops re-lists from starting; wait waits for the one running to end.
func (r *relister[T]) close() {
	r.mu.Lock()
	r.open = false
	r.mu.Unlock()
}

func (r *relister[T]) wait() { r.wg.Wait() }

// loop lists until no notification came during the last listing, and delivers each
// new list while s is the connection's session.
func (r *relister[T]) loop(c *Conn, s *session) {
	defer r.wg.Done()
	for {
		r.mu.Lock()
		if !r.dirty || !r.open {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.dirty = false
		r.mu.Unlock()
		// The listing is a request in flight on s, as a call is: it ends with the
		// session's life, and a close cancels it and waits for it (cutCalls), so that
		// the server is told rather than closed under it.
		s.inflight.Add(1)
		ctx, cancel := context.WithTimeout(s.life, relistTimeout)
		items, err := relist[T](ctx, s)
		cancel()
		c.release(s)
		if err != nil {
			// The session is failing; its watcher or a probe will tell. A later
			// notification may try again.
			r.mu.Lock()
			r.running = false
			r.mu.Unlock()
			return
		}
		r.items.Store(&items)
		c.listMu.Lock()
		if c.current.Load() == s {
			c.deliver(any(items))
		}
		c.listMu.Unlock()
	}
}

// relistTimeout bounds a re-list after a list_changed notification.
const relistTimeout = 10 * time.Second

// relist lists the kind of list T is, from s.
func relist[T any](ctx context.Context, s *session) (T, error) {
	var zero T
	var out any
	var err error
	switch any(zero).(type) {
	case []*mcp.Tool:
		out, err = s.s.ListTools(ctx)
	case []*mcp.Prompt:
		out, err = listAll(ctx, s, "prompts/list", listPromptsPage)
	case resourceList:
		out, err = listResources(ctx, s)
	}
	if err != nil {
		return zero, err
	}
	return out.(T), nil
}

// deliver hands a new list to its handler if it differs from the one last delivered.
// c.listMu is held.
func (c *Conn) deliver(items any) {
	switch l := items.(type) {
	case []*mcp.Tool:
		c.deliverTools(l)
	case []*mcp.Prompt:
		c.deliverPrompts(l)
	case resourceList:
		c.deliverResources(l)
	}
}

func (c *Conn) deliverTools(tools []*mcp.Tool) {
	if c.hs.ToolsChanged != nil && (c.sent.tools == nil || !reflect.DeepEqual(*c.sent.tools, tools)) {
		c.sent.tools = &tools
		safely(c, func() { c.hs.ToolsChanged(tools) })
	}
}

func (c *Conn) deliverPrompts(prompts []*mcp.Prompt) {
	if c.hs.PromptsChanged != nil && (c.sent.prompts == nil || !reflect.DeepEqual(*c.sent.prompts, prompts)) {
		c.sent.prompts = &prompts
		safely(c, func() { c.hs.PromptsChanged(prompts) })
	}
}

func (c *Conn) deliverResources(l resourceList) {
	if c.hs.ResourcesChanged != nil && (c.sent.resources == nil || !reflect.DeepEqual(*c.sent.resources, l)) {
		c.sent.resources = &l
		safely(c, func() { c.hs.ResourcesChanged(l.resources, l.templates) })
	}
}

// delivered is what a Conn last handed its list handlers, to tell a change. Under
// listMu.
type delivered struct {
	tools     *[]*mcp.Tool
	prompts   *[]*mcp.Prompt
	resources *resourceList
}
