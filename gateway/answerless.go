package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
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
type answerless struct {
	n     atomic.Int64 // how many cancels are kept: the writers' fast path
	mu    sync.RWMutex
	posts map[string]map[string]*served // by session ID, then POST number
}

// served is a POST of a stateful session being served.
type served struct {
	seq  uint64 // its number: the first served has the lowest
	body []byte
	once sync.Once
	ids  map[jsonrpc.ID]bool // of its requests, decoded at the first cancel that looks (once)
	// cancelled are its requests its client cancelled, and ended says it is
	// served no more (under answerless.mu).
	cancelled map[jsonrpc.ID]bool
	ended     bool
}

// mayCancel reports whether body may carry a cancel (a quick look, for every POST).
func mayCancel(body []byte) bool {
	return bytes.Contains(body, []byte(`"notifications/cancelled"`))
}

// serve notes post, a POST of session carrying body, as served until the function
// it returns is called, once its answers are written.
func (a *answerless) serve(session, post string, body []byte) (done func()) {
	seq, _ := strconv.ParseUint(post, 10, 64)
	s := &served{seq: seq, body: body}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.posts == nil {
		a.posts = map[string]map[string]*served{}
	}
	if a.posts[session] == nil {
		a.posts[session] = map[string]*served{}
	}
	a.posts[session][post] = s
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		s.ended = true
		a.n.Add(-int64(len(s.cancelled)))
		delete(a.posts[session], post)
		if len(a.posts[session]) == 0 {
			delete(a.posts, session)
		}
	}
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
	posts := make([]*served, 0, len(a.posts[session]))
	for _, s := range a.posts[session] {
		posts = append(posts, s)
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

// drop reports whether p, a write to post (a POST of session), is the answer to a
// request of post's that its client cancelled (an SSE event, or a JSON body): it is
// then not written, and forgotten.
func (a *answerless) drop(session, post string, p []byte) bool {
	if a.n.Load() == 0 || session == "" {
		return false
	}
	a.mu.RLock()
	s := a.posts[session][post]
	some := s != nil && len(s.cancelled) > 0
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
