package gateway

import (
	"bytes"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// answerless are the requests of stateful HTTP front sessions that their client
// cancelled (notifications/cancelled), whose answer is not to be sent. The go-sdk's
// server answers such a request with its handler's error (code 0, "context
// canceled"): MCP asks the receiver of a cancel not to answer, and the TypeScript
// SDK's client, which keeps reading the call's stream after it cancels, reported
// it as a response to an unknown request. (The stdio front drops it in
// transport.lineConn; a 2026-07-28 client cancels by closing the request's stream,
// and nothing is written then.) The Handler notes each cancel from the POST that
// carries it, before the SDK reads it; the POST that carries the request drops
// the answer as it is written (deadlineWriter), and ends without it. A cancel is
// kept for answerlessTTL, at most maxAnswerless of them and maxAnswerlessPerSession
// of a session's, and only for a session the gateway has; past that the answer is
// written, as before.
type answerless struct {
	n  atomic.Int64 // how many are kept: the writers' fast path
	mu sync.RWMutex
	by map[string]map[jsonrpc.ID]time.Time // by session ID, then request ID: when cancelled
}

const (
	answerlessTTL = time.Minute
	maxAnswerless = 4096
	// maxAnswerlessPerSession bounds one session's: a client flooding cancels
	// that name no request fills its own room, not the others'.
	maxAnswerlessPerSession = 256
)

// mayCancel reports whether body may carry a cancel (a quick look, for every POST).
func mayCancel(body []byte) bool {
	return bytes.Contains(body, []byte(`"notifications/cancelled"`))
}

// noteCancel notes the cancel that the body of a POST of session carries, if it is
// one.
func (a *answerless) noteCancel(session string, body []byte) {
	if session == "" || !mayCancel(body) {
		return
	}
	var msg struct {
		Method string `json:"method"`
		Params struct {
			RequestID any `json:"requestId"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.Method != "notifications/cancelled" {
		return
	}
	id, err := jsonrpc.MakeID(msg.Params.RequestID)
	if err != nil || !id.IsValid() {
		return
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n.Load() >= maxAnswerless {
		a.pruneLocked(now)
		if a.n.Load() >= maxAnswerless {
			return
		}
	}
	if a.by == nil {
		a.by = map[string]map[jsonrpc.ID]time.Time{}
	}
	ids := a.by[session]
	if ids == nil {
		ids = map[jsonrpc.ID]time.Time{}
		a.by[session] = ids
	}
	if _, ok := ids[id]; !ok {
		if len(ids) >= maxAnswerlessPerSession {
			return
		}
		a.n.Add(1)
	}
	ids[id] = now
}

// drop reports whether p, a write to the POST of a session's request, is the answer
// to a request its client cancelled (an SSE event, or a JSON body): it is then not
// written, and forgotten.
func (a *answerless) drop(session string, p []byte) bool {
	if a.n.Load() == 0 || session == "" {
		return false
	}
	a.mu.RLock()
	_, some := a.by[session]
	a.mu.RUnlock()
	if !some {
		return false
	}
	data := p
	if i := bytes.Index(p, []byte("data: ")); i >= 0 && !bytes.HasPrefix(bytes.TrimSpace(p), []byte("{")) {
		data = p[i+len("data: "):]
		if j := bytes.IndexByte(data, '\n'); j >= 0 {
			data = data[:j]
		}
	}
	var msg struct {
		ID     any    `json:"id"`
		Method string `json:"method"`
	}
	if json.Unmarshal(data, &msg) != nil || msg.Method != "" || msg.ID == nil {
		return false
	}
	id, err := jsonrpc.MakeID(msg.ID)
	if err != nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := a.by[session]
	if _, ok := ids[id]; !ok {
		return false
	}
	delete(ids, id)
	if len(ids) == 0 {
		delete(a.by, session)
	}
	a.n.Add(-1)
	return true
}

// prune forgets the cancels older than answerlessTTL (the sweeper's: those of
// sessions that ended, or of requests answered before their cancel came).
func (a *answerless) prune(now time.Time) {
	if a.n.Load() == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pruneLocked(now)
}

func (a *answerless) pruneLocked(now time.Time) {
	for session, ids := range a.by {
		for id, at := range ids {
			if now.Sub(at) > answerlessTTL {
				delete(ids, id)
				a.n.Add(-1)
			}
		}
		if len(ids) == 0 {
			delete(a.by, session)
		}
	}
}
