package gateway

import (
	"bytes"
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// answerless are the requests of stateful HTTP front sessions that their client
// cancelled (notifications/cancelled), whose answer is not to be sent. The go-sdk's
// server answers such a request with its handler's error (code 0, "context
// canceled"): MCP asks the receiver of a cancel not to answer, and the TypeScript
// SDK's client, which keeps reading the call's stream after it cancels, reported
// it as a response to an unknown request. (The stdio front drops it in
// transport.lineConn; a 2026-07-28 client cancels by closing the request's stream,
// and nothing is written then.)
//
// The Handler notes each POST of a stateful session while it is served (serve),
// and each cancel from the POST that carries it, before the SDK reads it, for the
// POST being served that carries the request it names (the first of them: the
// go-sdk refuses a POST reusing the ID of a request in flight); that POST drops the
// answer as it is written (deadlineWriter), and ends without it. A cancel naming no
// request being served (one answered before the cancel came) is not kept, and a
// POST's cancels are forgotten when it ends: what is kept is bounded by the requests
// being served. Cancels were once kept by ID for the whole session, for a minute:
// a request reusing the ID (MCP forbids it; the stdio front answers it) had its
// answer dropped, the go-sdk's refusal of one reusing the ID of a request in flight
// (400) went without its body, and a request answered before its cancel came had
// its ID's next answer dropped (200 and no answer: its client waited for ever).
//
// The bookkeeping costs a POST no allocation (it runs for every POST of a stateful
// session, and a cancel is rare): its served is the POST's deadlineWriter's own,
// and the set of POSTs served is one map keyed by it, which a cancel looks
// through for its session's.
type answerless struct {
	n     atomic.Int64 // how many cancels are kept: the writers' fast path
	mu    sync.RWMutex
	posts map[*served]struct{} // the POSTs of stateful sessions being served
	next  uint64               // numbers them as they are noted (served.seq)
}

// served is a POST of a stateful session being served.
type served struct {
	session string
	body    []byte
	seq     uint64 // its number: the first noted has the lowest
	once    sync.Once
	ids     map[jsonrpc.ID]bool // of its requests, decoded at the first cancel that looks (once)
	// cancelled are its requests its client cancelled, and ended says it is
	// served no more (under answerless.mu).
	cancelled map[jsonrpc.ID]bool
	ended     bool
}

// mayCancel reports whether body may carry a cancel (a quick look, for every POST).
func mayCancel(body []byte) bool {
	return bytes.Contains(body, []byte(`"notifications/cancelled"`))
}

// serve notes s, a POST of s.session carrying s.body, as served until end(s) is
// called, once its answers are written. s is the caller's, and is not to be
// reused before end.
func (a *answerless) serve(s *served) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.posts == nil {
		a.posts = map[*served]struct{}{}
	}
	a.next++
	s.seq = a.next
	a.posts[s] = struct{}{}
}

// end notes s served no more, and forgets its cancels.
func (a *answerless) end(s *served) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s.ended = true
	a.n.Add(-int64(len(s.cancelled)))
	s.cancelled = nil
	delete(a.posts, s)
}

// noteCancel notes each cancel that body, a POST of session (a message, or a
// batch), carries, for the first POST being served of session that carries the
// request it names.
func (a *answerless) noteCancel(session string, body []byte) {
	if session == "" || !mayCancel(body) {
		return
	}
	var cancels []jsonrpc.ID
	for _, m := range messages(body) {
		if m.Method != "notifications/cancelled" || m.ID != nil {
			continue
		}
		var p struct {
			RequestID any `json:"requestId"`
		}
		if json.Unmarshal(m.Params, &p) != nil {
			continue
		}
		if id, err := jsonrpc.MakeID(p.RequestID); err == nil && id.IsValid() {
			cancels = append(cancels, id)
		}
	}
	if len(cancels) == 0 {
		return
	}
	a.mu.RLock()
	var posts []*served
	for s := range a.posts {
		if s.session == session {
			posts = append(posts, s)
		}
	}
	a.mu.RUnlock()
	for _, s := range posts { // decoded outside the lock: bodies are as large as 4 MiB
		s.once.Do(func() { s.ids = requestIDs(s.body) })
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range cancels {
		var first *served
		for _, s := range posts {
			if s.ids[id] && !s.ended && (first == nil || s.seq < first.seq) {
				first = s
			}
		}
		if first == nil || first.cancelled[id] {
			continue
		}
		if first.cancelled == nil {
			first.cancelled = map[jsonrpc.ID]bool{}
		}
		first.cancelled[id] = true
		a.n.Add(1)
	}
}

// A message is what the answerless look at of a JSON-RPC message.
type message struct {
	ID     any             `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// messages decodes body, a message or a batch (nil if it is neither).
func messages(body []byte) []message {
	if i := len(body) - len(bytes.TrimLeft(body, " \t\r\n")); i < len(body) && body[i] == '[' {
		var batch []message
		if json.Unmarshal(body, &batch) != nil {
			return nil
		}
		return batch
	}
	var m message
	if json.Unmarshal(body, &m) != nil {
		return nil
	}
	return []message{m}
}

// requestIDs returns the IDs of the requests (calls) of body.
func requestIDs(body []byte) map[jsonrpc.ID]bool {
	ids := map[jsonrpc.ID]bool{}
	for _, m := range messages(body) {
		if m.Method == "" || m.ID == nil {
			continue
		}
		if id, err := jsonrpc.MakeID(m.ID); err == nil && id.IsValid() {
			ids[id] = true
		}
	}
	return ids
}

// drop reports whether p, a write to s (a POST of a stateful session; nil for
// another), is the answer to a request of s's that its client cancelled (an SSE
// event, or a JSON body): it is then not written, and forgotten.
func (a *answerless) drop(s *served, p []byte) bool {
	if a.n.Load() == 0 || s == nil {
		return false
	}
	a.mu.RLock()
	some := len(s.cancelled) > 0
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
	if !s.cancelled[id] {
		return false
	}
	delete(s.cancelled, id)
	a.n.Add(-1)
	return true
}
