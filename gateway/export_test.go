package gateway

import (
	"runtime"
	"strconv"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/testutil"
)

// SetBodyWait sets how long a request waits for room for its body, for the
// handlers made until the returned function restores it.
func SetBodyWait(d time.Duration) (restore func()) {
	old := bodyWait
	bodyWait = d
	return func() { bodyWait = old }
}

// Remembered returns how many session IDs the gateway remembers as deleted and
// how many POSTs as gone (see inflight).
func (g *Gateway) Remembered() (deleted, gone int) {
	g.inflight.mu.Lock()
	defer g.inflight.mu.Unlock()
	return g.inflight.deleted.len(), g.inflight.gone.len()
}

// AttributedParks reports whether the front call a backend's own request would be
// attributed to (see calls.attribute) takes input requests: what askFront reads of
// it, as a backend's sampling request on a protocol before 2026-07-28 does.
func (g *Gateway) AttributedParks(server string) bool {
	fc, _ := g.calls.attribute(server)
	return fc != nil && fc.parking != nil
}

// SetCutLinger sets how long a call the front cancelled counts as one its backend
// may still run, for the gateways made until the returned function restores it.
func SetCutLinger(d time.Duration) (restore func()) {
	old := cutLinger
	cutLinger = d
	return func() { cutLinger = old }
}

// EndGonePosts ends up to n POSTs of g's HTTP front whose client went away before
// any request of theirs started, as Handler does, and returns how many it ended
// before it had spent limit of work: its thread's CPU time (see testutil.WorkClock), not
// the wall clock, which also counts the time other processes held the CPUs.
func (g *Gateway) EndGonePosts(n int, limit time.Duration) int {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	spent := testutil.WorkClock()
	for i := range n {
		if i%1000 == 0 && spent() > limit {
			return i
		}
		g.inflight.postDone(strconv.FormatUint(g.inflight.posts.Add(1), 10), true)
	}
	return n
}

// SetMaxParked sets how many calls may be parked at once per backend, until the
// returned function restores it.
func SetMaxParked(n int) (restore func()) {
	old := maxParked
	maxParked = n
	return func() { maxParked = old }
}

// SetSessionRequests sets how many requests one front session has in flight at
// once, until the returned function restores it.
func SetSessionRequests(n int) (restore func()) {
	old := maxSessionRequests
	maxSessionRequests = n
	return func() { maxSessionRequests = old }
}

// SetParkTimeout sets how long a parked call waits for its client's retry, until the
// returned function restores it.
func SetParkTimeout(d time.Duration) (restore func()) {
	old := parkTimeout
	parkTimeout = d
	return func() { parkTimeout = old }
}

// SetGatherWait sets how long a round gathers a backend's requests, until the
// returned function restores it.
func SetGatherWait(d time.Duration) (restore func()) {
	old := gatherWait
	gatherWait = d
	return func() { gatherWait = old }
}

// Parked returns how many calls are parked.
func (g *Gateway) Parked() int {
	g.parked.mu.Lock()
	defer g.parked.mu.Unlock()
	return len(g.parked.by)
}

// Sizes returns how many entries each of the gateway's maps holds: what it keeps
// for front sessions, calls and backends, to be compared before and after churn.
func (g *Gateway) Sizes() map[string]int {
	s := map[string]int{}
	g.sessMu.Lock()
	s["levels"], s["roots"], s["rootsAsked"], s["subs"] = len(g.levels), len(g.roots), len(g.rootsAsked), len(g.subs)
	s["subCount"], s["subConn"], s["subPending"], s["levelWaits"] = len(g.subCount), len(g.subConn), len(g.subPending), len(g.levelWaits)
	g.sessMu.Unlock()
	g.calls.mu.Lock()
	s["calls"] = len(g.calls.by)
	for server, l := range g.calls.cut {
		s["cut"] += len(l)
		s["cut:"+server] = len(l)
	}
	s["cutServers"] = len(g.calls.cut)
	g.calls.mu.Unlock()
	g.inflight.mu.Lock()
	s["inflight"], s["inflightSessions"] = len(g.inflight.reqs), len(g.inflight.sessions)
	g.inflight.mu.Unlock()
	g.parked.mu.Lock()
	s["parked"] = len(g.parked.by)
	for _, o := range g.parked.order {
		s["parkedOrder"] += len(o)
	}
	s["parkedServers"] = len(g.parked.order)
	g.parked.mu.Unlock()
	g.elicitations.mu.Lock()
	s["elicitations"] = g.elicitations.by.len()
	g.elicitations.mu.Unlock()
	g.listMu.Lock()
	s["lists"] = len(g.lists)
	g.listMu.Unlock()
	g.regMu.Lock()
	s["refused"] = len(g.refused)
	s["regTools"] = len(g.reg.tools)
	g.regMu.Unlock()
	g.settleMu.Lock()
	s["unsettled"], s["listed"] = len(g.unsettled), len(g.listed)
	g.settleMu.Unlock()
	n := 0
	for range g.server.Sessions() {
		n++
	}
	s["frontSessions"] = n
	return s
}

// SetMaxSubscriptions sets how many resources one front session, and the front
// sessions together, may be subscribed to, until the returned function restores them.
func SetMaxSubscriptions(session, all int) (restore func()) {
	oldSession, oldAll := maxSessionSubscriptions, maxSubscriptions
	maxSessionSubscriptions, maxSubscriptions = session, all
	return func() { maxSessionSubscriptions, maxSubscriptions = oldSession, oldAll }
}

// SetSweepLooked sets the hook a sweep calls once it has first looked at the front
// sessions, until the returned function restores it.
func SetSweepLooked(f func()) (restore func()) {
	old := sweepLooked
	sweepLooked = f
	return func() { sweepLooked = old }
}

// SetServerFinished sets the hook called once a backend is known to be done with a
// call a front gave up on (see cutMark.ServerFinished), until the returned
// function restores it.
func SetServerFinished(f func(server string)) (restore func()) {
	old := serverFinished.Swap(&f)
	return func() { serverFinished.Store(old) }
}

// SetCallEnded sets the hook called as a front call to a backend ends (cut: the
// front cancelled it before its backend answered), until the returned function
// restores it.
func SetCallEnded(f func(server string, cut bool)) (restore func()) {
	old := callEnded.Swap(&f)
	return func() { callEnded.Store(old) }
}

// AnswerlessKept returns how many cancelled requests of stateful HTTP sessions the
// gateway keeps, whose answers it will not write.
func (g *Gateway) AnswerlessKept() int { return int(g.answerless.n.Load()) }

// SetFrontAskTimeout sets how long a backend's request asked of a front client
// before 2026-07-28 waits for its answer, until the returned function restores it.
func SetFrontAskTimeout(d time.Duration) (restore func()) {
	old := frontAskTimeout
	frontAskTimeout = d
	return func() { frontAskTimeout = old }
}
