package effects

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A Conn carries out the invoked effects of one connection over package transport: it
// is the machine.Invoker of that connection's machine, and it holds the connection's
// current session, which calls read without going through the machine.
//
// connect, probe, retire and teardown run on the machine's owner, so every session
// is opened and closed there. Other goroutines (the session's end watcher, calls that
// find the session broken) only report to the machine, through Post.
type Conn struct {
	cfg  atomic.Pointer[versioned] // read by connect; replaced by SetConfig
	opts ConnOptions

	post   func(machine.Event) // delivers an event to the machine; set by Bind
	nextID uint64              // the id of the next session; owner only

	current atomic.Pointer[Session]
	retired *Session // a session connect replaced, until retire closes it; owner only
	last    atomic.Pointer[Attempt]

	toolsMu sync.Mutex // orders OnTools calls with the change of current session
}

// versioned is a transport config and its generation: 1 for NewConn's, then one more
// for each SetConfig.
type versioned struct {
	cfg transport.Config
	gen uint64
}

// An Attempt is the outcome of a connect: the generation of the config it dialed (see
// SetConfig), and why it failed, or nil if the session came up.
type Attempt struct {
	Gen uint64
	Err error
}

// ConnOptions configure a Conn.
type ConnOptions struct {
	// Client is the client implementation sent in initialize.
	Client *mcp.Implementation
	// Logger receives the sessions' own events.
	Logger *slog.Logger
	// OnTools is called with the new tool list after a session comes up (on the
	// owner, as connect ends) and after each re-list that tools/list_changed
	// notifications set off (bursts coalesce into one re-list at a time; on the
	// re-list's goroutine). It must not block for long: the first call holds up
	// ready, and Close cannot interrupt it.
	OnTools func([]*mcp.Tool)
	// OnOpen and OnClose, if set, are called on the owner just after a
	// session opens and just before it is closed. Tests use them to check who opens
	// and closes sessions.
	OnOpen, OnClose func(*Session)
	// Dial opens sessions; transport.DialClient when nil. A wrapper can decorate
	// real sessions (tests do).
	Dial transport.Dialer
}

// NewConn returns the effects of a connection to the server cfg describes. Bind it to
// its machine before the machine starts.
func NewConn(cfg transport.Config, opts ConnOptions) *Conn {
	if opts.Dial == nil {
		opts.Dial = transport.DialClient
	}
	c := &Conn{opts: opts}
	c.cfg.Store(&versioned{cfg, 1})
	return c
}

// Bind gives the Conn the function that posts events to its machine.
func (c *Conn) Bind(post func(machine.Event)) { c.post = post }

// Config returns the connection's transport config.
func (c *Conn) Config() transport.Config { return c.cfg.Load().cfg }

// SetConfig replaces the transport config that the next connect dials. The session up
// now, if any, is not touched: ask the machine for a reconnect to move to the new one.
// It returns the new config's generation, which LastAttempt reports once a connect has
// dialed it.
func (c *Conn) SetConfig(cfg transport.Config) uint64 {
	for {
		old := c.cfg.Load()
		if c.cfg.CompareAndSwap(old, &versioned{cfg, old.gen + 1}) {
			return old.gen + 1
		}
	}
}

// LastAttempt returns the outcome of the last connect, or nil if none has ended.
func (c *Conn) LastAttempt() *Attempt { return c.last.Load() }

// A Session is one live session of a Conn, as calls see it.
type Session struct {
	ID    uint64 // unique within its Conn, starting at 1
	S     transport.Client
	Start time.Time

	tools    atomic.Pointer[[]*mcp.Tool]
	reported atomic.Bool  // a failure of this session has been reported to the machine
	inflight atomic.Int64 // calls in flight on it
	draining atomic.Bool  // no new call may start on it
	drained  chan struct{}
	relist   relister
}

// relister is a session's re-listing of its tools after tools/list_changed. Re-lists
// start only while the session is open for them: from the end of connect (whose own
// listing comes first) to the start of its close, which then waits for them. A
// notification before connect has listed just marks the list dirty.
type relister struct {
	mu      sync.Mutex
	open    bool // re-lists may start
	running bool // a re-list goroutine is running
	dirty   bool // a notification came since the last listing began
	wg      sync.WaitGroup
}

// Tools returns the session's tool list, as last listed.
func (s *Session) Tools() []*mcp.Tool {
	if p := s.tools.Load(); p != nil {
		return *p
	}
	return nil
}

// Tool returns the tool with the given name, or nil.
func (s *Session) Tool(name string) *mcp.Tool {
	for _, t := range s.Tools() {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// Current returns the live session calls may use, or nil while there is none.
func (c *Conn) Current() *Session { return c.current.Load() }

// Acquire returns the current session with a call counted in flight on it, or nil if
// there is none or it is being torn down. The caller must Release it.
func (c *Conn) Acquire() *Session {
	s := c.current.Load()
	if s == nil {
		return nil
	}
	s.inflight.Add(1)
	// Counted before looking again: a teardown that stored nil and set draining
	// after this either sees the count and waits, or is seen here.
	if s.draining.Load() || c.current.Load() != s {
		s.Release()
		return nil
	}
	return s
}

// Release ends a call counted by Acquire.
func (s *Session) Release() {
	if s.inflight.Add(-1) == 0 && s.draining.Load() {
		select {
		case s.drained <- struct{}{}:
		default:
		}
	}
}

// OwnClose reports whether an error a call got on s now is an artifact of our own
// close: s is being closed, and not because it failed (a failure was reported, by the
// session's end, a probe or a call, before the teardown it set off).
func (s *Session) OwnClose() bool { return s.S.Closing() && !s.reported.Load() }

// Report tells the machine that this session is broken, with the cause the classifier
// gave the error. Only the first report of a session is posted; only a cause that
// counts is a report.
func (c *Conn) Report(s *Session, cause states.Cause, err error) {
	if !cause.Counts() || c.post == nil || !s.reported.CompareAndSwap(false, true) {
		return
	}
	c.post(machine.Event{Trigger: states.Lost, Cause: cause, Err: err, Session: s.ID})
}

// Invoke runs one of the spec's invoked effects. It implements machine.Invoker.
func (c *Conn) Invoke(ctx context.Context, inv machine.Invocation) machine.Event {
	switch inv.Effect {
	case "connect":
		v := c.cfg.Load()
		ev := c.connect(ctx, inv, v.cfg)
		c.last.Store(&Attempt{Gen: v.gen, Err: ev.Err})
		return ev
	case "probe":
		return c.probe(ctx, inv)
	case "teardown":
		return c.teardown(ctx, inv)
	case "retire":
		return c.retire(ctx, inv)
	}
	panic("effects: no code for the invoked effect " + inv.Effect)
}

// classifyEffect classifies the error an effect ran into. When the effect's context
// has ended, what counts is why it ended (its timeout, or Close), which the SDK's bare
// context error does not say: the error is then that reason.
func classifyEffect(ctx context.Context, inv machine.Invocation, err error, ownClose bool) (states.Cause, error) {
	if ctx.Err() == nil {
		return Classify(err, ownClose), err
	}
	why := context.Cause(ctx)
	msg := fmt.Sprintf("%s interrupted by Close", inv.Effect)
	if errors.Is(why, machine.ErrEffectTimeout) {
		msg = fmt.Sprintf("%s: no answer within %s (%s)", inv.Effect, inv.Timeout, inv.TimeoutPolicy)
	}
	return Classify(why, ownClose), &reasonError{msg, why}
}

// reasonError says why an effect's context ended, in words, and wraps the reason.
type reasonError struct {
	msg    string
	reason error
}

func (e *reasonError) Error() string { return e.msg }
func (e *reasonError) Unwrap() error { return e.reason }

// connect dials, initializes and lists tools.
func (c *Conn) connect(ctx context.Context, inv machine.Invocation, cfg transport.Config) machine.Event {
	c.nextID++
	s := &Session{ID: c.nextID, drained: make(chan struct{}, 1)}
	ts, err := c.opts.Dial(ctx, cfg, transport.Options{
		Client:         c.opts.Client,
		Logger:         c.opts.Logger,
		OnEnd:          func(err error) { c.Report(s, endCause(err), err) },
		OnToolsChanged: func() { c.toolsChanged(s) },
	})
	if err != nil {
		cause, err := classifyEffect(ctx, inv, err, false)
		return machine.Event{Trigger: states.ConnectFailed, Cause: cause, Err: err}
	}
	s.S, s.Start = ts, time.Now()
	if c.opts.OnOpen != nil {
		c.opts.OnOpen(s)
	}
	tools, err := ts.ListTools(ctx)
	if err != nil {
		cause, err := classifyEffect(ctx, inv, err, false)
		c.closeNow(ctx, s)
		return machine.Event{Trigger: states.ConnectFailed, Cause: cause, Err: err}
	}
	s.tools.Store(&tools)
	c.toolsMu.Lock() // no re-list of the old session reports its tools after these
	old := c.current.Swap(s)
	if c.opts.OnTools != nil {
		c.opts.OnTools(tools)
	}
	c.toolsMu.Unlock()
	if old != nil {
		// Make before break: calls move to the new session now; the old one
		// finishes those in flight and is closed by retire (or teardown).
		old.draining.Store(true)
		old.relist.mu.Lock()
		old.relist.open = false // its tools are no longer anyone's
		old.relist.mu.Unlock()
		c.closeRetired(ctx) // one that a spec without retire left open
		c.retired = old
	}
	s.relist.mu.Lock()
	s.relist.open = true
	c.relistLocked(s) // for a change that came while connecting
	s.relist.mu.Unlock()
	return machine.Event{Trigger: states.Connected, Session: s.ID}
}

// probe checks the session with a request that reaches the server and, if the server
// answered, recycles a session older than max_session_age. The check comes first even
// then: a session whose replacement cannot be opened serves on, and must still be
// found dead if its server dies.
func (c *Conn) probe(ctx context.Context, inv machine.Invocation) machine.Event {
	s := c.current.Load()
	if s == nil {
		return machine.Event{Trigger: states.ProbeFailed, Cause: states.CauseLost, Err: errNoSession}
	}
	healthy := machine.Event{Trigger: states.ProbeOK, Session: s.ID}
	if age := inv.Policies.MaxSessionAge; age > 0 && time.Since(s.Start) >= age {
		healthy.Trigger = states.Recycle
	}
	err := s.S.Probe(ctx)
	if err == nil {
		return healthy
	}
	cause, err := classifyEffect(ctx, inv, err, false)
	if cause == states.CauseServer {
		// The server answered, with an error: the connection works.
		return healthy
	}
	s.reported.Store(true) // the probe reports it; calls need not
	return machine.Event{Trigger: states.ProbeFailed, Cause: cause, Err: err, Session: s.ID}
}

var errNoSession = errors.New("no session")

// endCause classifies the error a session ended with by itself. Whatever it says, the
// session is gone: an end that classifies as no failure that counts (a server or
// protocol error, a clean exit) is still the transport lost, or the machine would wait
// for a probe or a call to find out.
func endCause(err error) states.Cause {
	if c := Classify(err, false); c.Counts() {
		return c
	}
	return states.CauseLost
}

// retire closes the session connect replaced, once the calls in flight on it have
// finished (for up to half of teardown_timeout). Like a planned teardown's, its error
// counts only if it holds a real failure.
func (c *Conn) retire(ctx context.Context, inv machine.Invocation) machine.Event {
	s := c.retired
	c.retired = nil
	if s == nil {
		return machine.Event{Trigger: states.Retired}
	}
	drain(ctx, s, inv.Policies.TeardownTimeout/2)
	cause, err := closeOutcome(ctx, inv, c.closeNow(ctx, s))
	return machine.Event{Trigger: states.Retired, Cause: cause, Err: err}
}

// closeOutcome classifies the error of our own close of a session: noise of the close
// itself is an artifact, and what else it ran into counts as it would anywhere.
func closeOutcome(ctx context.Context, inv machine.Invocation, err error) (states.Cause, error) {
	if err == nil {
		return states.CauseNone, nil
	}
	cause, reason := classifyEffect(ctx, inv, err, true)
	if errors.Is(context.Cause(ctx), machine.ErrEffectTimeout) {
		// We forced the close at our own deadline (a server that hangs in close):
		// that alone is an artifact, as the classifier has it, not a timeout. What
		// else the close ran into still counts.
		cause = Classify(err, true)
	}
	return cause, reason
}

// closeRetired closes the session connect replaced at once, if retire has not.
func (c *Conn) closeRetired(ctx context.Context) {
	if s := c.retired; s != nil {
		c.retired = nil
		_ = c.closeNow(ctx, s)
	}
}

// drain waits, for up to d or until ctx ends, for the calls in flight on s to finish.
// s is draining: no new call starts on it.
func drain(ctx context.Context, s *Session, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for s.inflight.Load() > 0 && ctx.Err() == nil {
		select {
		case <-s.drained:
		case <-ctx.Done():
		}
	}
}

// teardown closes the current session, and the session it replaced if that one has not
// been retired (Close came first). A planned teardown first lets the calls in flight
// finish (for up to half of teardown_timeout) while new calls wait for the next
// session. Its error counts only if the teardown was planned and the error holds a
// real failure: after a failure, the failure was counted when it was found.
func (c *Conn) teardown(ctx context.Context, inv machine.Invocation) machine.Event {
	c.closeRetired(ctx)
	s := c.current.Swap(nil)
	if s == nil {
		return machine.Event{Trigger: states.TornDown}
	}
	s.draining.Store(true)
	if inv.Vars.Planned {
		drain(ctx, s, inv.Policies.TeardownTimeout/2)
	}
	cause, err := closeOutcome(ctx, inv, c.closeNow(ctx, s))
	if !inv.Vars.Planned && cause != states.CauseNone {
		cause = states.CauseArtifact // the failure behind this teardown was counted already
	}
	return machine.Event{Trigger: states.TornDown, Cause: cause, Err: err}
}

// closeNow closes s under ctx and waits for its re-lists to end.
func (c *Conn) closeNow(ctx context.Context, s *Session) error {
	if c.opts.OnClose != nil {
		c.opts.OnClose(s)
	}
	s.relist.mu.Lock()
	s.relist.open = false // no re-list starts from here on
	s.relist.mu.Unlock()
	err := s.S.Close(ctx)
	s.relist.wg.Wait()
	return err
}

// toolsChanged coalesces tools/list_changed notifications: one re-list at a time, and
// one more after it if any arrived meanwhile.
func (c *Conn) toolsChanged(s *Session) {
	s.relist.mu.Lock()
	defer s.relist.mu.Unlock()
	s.relist.dirty = true
	c.relistLocked(s)
}

// relistLocked starts a re-list if one is due, the session is open for it and none is
// running. s.relist.mu is held.
func (c *Conn) relistLocked(s *Session) {
	r := &s.relist
	if r.dirty && r.open && !r.running {
		r.running = true
		r.wg.Add(1)
		go c.relistLoop(s)
	}
}

// relistLoop lists s's tools until no notification came during the last listing.
func (c *Conn) relistLoop(s *Session) {
	r := &s.relist
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
		ctx, cancel := context.WithTimeout(context.Background(), relistTimeout)
		tools, err := s.S.ListTools(ctx)
		cancel()
		if err != nil {
			// The session is failing; its watcher or a probe will tell. A later
			// notification may try again.
			r.mu.Lock()
			r.running = false
			r.mu.Unlock()
			return
		}
		s.tools.Store(&tools)
		c.toolsMu.Lock()
		if c.opts.OnTools != nil && c.current.Load() == s {
			c.opts.OnTools(tools)
		}
		c.toolsMu.Unlock()
	}
}

// relistTimeout bounds a re-list after tools/list_changed.
const relistTimeout = 10 * time.Second
