package gateway

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file passes a backend's requests (sampling, elicitation, roots) through to a
// front client on protocol 2026-07-28, where a server may not send it requests of its
// own: the front request is answered with an input-required result (SEP-2322) naming
// what the backend asks, while the backend's call waits, parked; the client's retry,
// carrying the answers and the parked call's requestState, resumes it. A parked call
// lives in this gateway process (behind several replicas, the retry must reach the
// same one) and is cancelled if no retry comes within parkTimeout, or when more than
// maxParked wait on one backend and it is the oldest.

// parkTimeout is how long a parked call waits for its front client's retry. A
// variable for tests.
var parkTimeout = 5 * time.Minute

// gatherWait is how long the gateway waits, after a backend's first request in a
// round, for others the backend sends with it (a backend on 2026-07-28 asks for
// several inputs at once), so that they reach the front client in one round. A
// variable for tests.
var gatherWait = 10 * time.Millisecond

// A need is a backend's request, waiting for the front's answer.
type need struct {
	params mcp.InputRequest
	reply  chan needAnswer
}

type needAnswer struct {
	res mcp.InputResponse
	err error
}

type callDone struct {
	res any
	err error
}

// A parking is the multi-round-trip state of one front call: the backend's call runs
// on a goroutine of its own, across the front's retries.
type parking struct {
	fc *frontCall // the call parked; set by roundTrip, read by its retries
	// what is the front request the parking serves (its method and name or URI):
	// only a retry of that request resumes it.
	what    string
	needs   chan need
	done    chan callDone
	cancel  context.CancelFunc
	pending map[string]need // the needs the front was asked for, by key
	seq     int
	// over is closed when the call ends or is given up (cancel): a backend's
	// request waiting for the front's answer then gets an error, whether or not
	// its backend cancels it.
	over     chan struct{}
	overOnce sync.Once
}

// newParking returns the parking of a front call that may take input requests,
// given to the call as it is published (calls.start); roundTrip starts it.
func newParking(what string) *parking {
	return &parking{what: what, needs: make(chan need), done: make(chan callDone, 1), over: make(chan struct{})}
}

// errCallOver is what a backend's request for a parked call gets once the call is
// over: no answer will come for it.
var errCallOver = errors.New("mcpfsm gateway: the front call it serves is over (answered, cancelled, or given up: its client did not retry it)")

// ask hands a backend's request to the front call and waits for the answer.
func (p *parking) ask(ctx context.Context, params mcp.InputRequest) (mcp.InputResponse, error) {
	reply := make(chan needAnswer, 1)
	select {
	case p.needs <- need{params: params, reply: reply}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.over:
		return nil, errCallOver
	}
	select {
	case a := <-reply:
		return a.res, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.over:
		return nil, errCallOver
	}
}

// maxParked is the most calls parked at once to one backend: past it the oldest is
// given up (cancelled; its client's retry is told the requestState is not held).
// A backend's connection runs at most 256 of its requests to the front at once, and
// each parked call holds one: clients that never call again (2026-07-28 clients are
// not told apart) would otherwise hold them all, for parkTimeout, and every other
// client's sampling and elicitation there would be refused. A variable for tests.
var maxParked = 64

// parked are the parked calls, by requestState.
type parked struct {
	mu    sync.Mutex
	by    map[string]*parkedCall
	order map[string][]string // by backend, the requestStates in the order parked (some taken since)
}

type parkedCall struct {
	p     *parking
	timer *time.Timer
}

func (ps *parked) put(p *parking) string {
	token := "mcpfsm-gateway-" + rand.Text()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.by == nil {
		ps.by, ps.order = map[string]*parkedCall{}, map[string][]string{}
	}
	pc := &parkedCall{p: p}
	pc.timer = time.AfterFunc(parkTimeout, func() {
		if p, _ := ps.take(token, p.what); p != nil {
			p.cancel()
		}
	})
	ps.by[token] = pc
	server := p.fc.server
	// The requestStates of server still parked, this one last; the oldest past
	// maxParked given up.
	order := slices.DeleteFunc(ps.order[server], func(t string) bool { return ps.by[t] == nil })
	order = append(order, token)
	for len(order) > maxParked {
		old := ps.by[order[0]]
		delete(ps.by, order[0])
		old.timer.Stop()
		old.p.cancel()
		order = order[1:]
	}
	ps.order[server] = order
	return token
}

// take returns the parked call of token, no longer parked, if it serves what; nil
// and false if there is none; nil and true if it serves another request (it stays
// parked).
func (ps *parked) take(token, what string) (p *parking, other bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	pc := ps.by[token]
	if pc == nil {
		return nil, false
	}
	if pc.p.what != what {
		return nil, true
	}
	delete(ps.by, token)
	pc.timer.Stop()
	return pc.p, false
}

// giveUp cancels the parked calls to the servers for which gone holds (a reload
// removed them: no retry can reach them, their names gone).
func (ps *parked) giveUp(gone func(server string) bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for token, pc := range ps.by {
		if gone(pc.p.fc.server) {
			pc.timer.Stop()
			pc.p.cancel()
			delete(ps.by, token)
		}
	}
	for server := range ps.order {
		if gone(server) {
			delete(ps.order, server)
		}
	}
}

// closeAll cancels every parked call (at Close).
func (ps *parked) closeAll() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for token, pc := range ps.by {
		pc.timer.Stop()
		pc.p.cancel()
		delete(ps.by, token)
	}
	clear(ps.order) // not nil: a call parking as the gateway closes must not panic in put
}

// roundTrip runs a front request on a 2026-07-28 front: a new call (fc, whose parking
// newParking made) starts the backend's call (run) parked; a retry (its requestState one of ours) gives the parked call the
// front's answers. Either way it returns what comes first: the backend's result, or
// the backend's next requests as an input-required result (made by inputRequired).
// what names the front request (its method and name or URI): a retry resumes only a
// parked call of the same request, and sends its progress and log messages on to
// (the retry's stream) from then on.
func roundTrip[R any](g *Gateway, ctx context.Context, fc *frontCall, to frontStream, what, state string, responses mcp.InputResponseMap,
	run func(context.Context) (R, error), inputRequired func(mcp.InputRequestMap, string) R) (R, error) {
	var zero R
	var p *parking
	if state != "" {
		var other bool
		if p, other = g.parked.take(state, what); other {
			return zero, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("mcpfsm gateway: the requestState is not of this request (%s): retry the request it was given for", what)}
		}
		if p == nil {
			return zero, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "mcpfsm gateway: the requestState is not one this gateway holds (unknown, answered already, or expired): call again from the start"}
		}
		p.fc.rebind(to)
		g.calls.between(p.fc, false)
		for key, nd := range p.pending {
			if r, ok := responses[key]; ok && r != nil {
				nd.reply <- needAnswer{res: r}
			} else {
				nd.reply <- needAnswer{err: fmt.Errorf("the front client did not answer %s", key)}
			}
		}
		p.pending = nil
	} else {
		// The backend's call outlives this front request (it waits for the retry),
		// keeping its values (the front call) but not its end.
		bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		stop := context.AfterFunc(g.ctx, cancel)
		// Only roundTrip, run's goroutine and parked (after put) read cancel; the
		// backend's requests, which may see fc from its start, read the channels.
		p = fc.parking
		p.cancel = func() {
			stop()
			cancel()
			p.overOnce.Do(func() { close(p.over) })
		}
		p.fc = fc
		if !g.spawn(func() {
			res, err := run(bctx)
			cut := err != nil && bctx.Err() != nil
			p.cancel()
			// Over before its result goes out: a client that has it may call
			// again at once, and a backend's request is attributed to the calls
			// in flight (see calls.attribute).
			g.calls.end(fc, cut)
			p.done <- callDone{res, err}
		}) {
			p.cancel()
			g.calls.end(fc, false)
			return zero, requestError("mcpfsm gateway: closing")
		}
	}
	select {
	case d := <-p.done:
		if d.err != nil {
			return zero, d.err
		}
		res, ok := d.res.(R)
		if !ok { // cannot be: the retry is of the same request
			return zero, requestError(fmt.Sprintf("mcpfsm gateway: the parked call of %s answered with %T", what, d.res))
		}
		return res, nil
	case nd := <-p.needs:
		// What the call sent before it asked goes out before the input requests.
		p.fc.out.flush(ctx)
		reqs := mcp.InputRequestMap{}
		p.pending = map[string]need{}
		add := func(nd need) {
			p.seq++
			key := fmt.Sprintf("mcpfsm-%d", p.seq)
			reqs[key], p.pending[key] = nd.params, nd
		}
		add(nd)
		t := time.NewTimer(gatherWait)
		defer t.Stop()
	gather:
		for {
			select {
			case nd := <-p.needs:
				add(nd)
			case <-t.C:
				break gather
			case <-ctx.Done():
				// The front request ended while gathering: nobody is left to
				// retry the call, which ends, its backend's requests answered
				// with errCallOver.
				p.cancel()
				return zero, ctx.Err()
			}
		}
		if ctx.Err() != nil { // it ended as the gathering did (select picked the timer)
			p.cancel()
			return zero, ctx.Err()
		}
		g.calls.between(p.fc, true)
		return inputRequired(reqs, g.parked.put(p)), nil
	case <-ctx.Done():
		p.cancel() // the front request ended (its client went away): so does the call
		return zero, ctx.Err()
	}
}
