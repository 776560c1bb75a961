package gateway

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"fmt"
	"hash/crc32"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPOptions configure the gateway's streamable HTTP handler.
type HTTPOptions struct {
	// Token, if set, is the bearer token every request must carry
	// (Authorization: Bearer TOKEN); others get 401.
	Token string
	// SessionTimeout closes a front session that has sent no request for this long;
	// 0 keeps idle sessions for ever.
	SessionTimeout time.Duration
}

// Handler returns an http.Handler that serves the gateway over streamable HTTP:
// stateful sessions (Mcp-Session-Id) for clients on protocol versions before
// 2026-07-28, and stateless requests for clients on 2026-07-28 and later (told apart by
// their Mcp-Protocol-Version header), one server for both. A request whose client goes
// away (a 2026-07-28 one) is cancelled, and with it the backend's call.
func (g *Gateway) Handler(o HTTPOptions) http.Handler {
	getServer := func(*http.Request) *mcp.Server { return g.server }
	logger := g.log.With("component", "gateway http")
	stateful := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		SessionTimeout: o.SessionTimeout, Logger: logger,
	})
	stateless := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Stateless: true, PropagateRequestCancellation: true, Logger: logger,
	})
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del(postHeader) // ours alone
		if v := r.Header.Get("Mcp-Protocol-Version"); v >= "2026-07-28" && r.Header.Get("Mcp-Session-Id") == "" {
			stateless.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodPost {
			stateful.ServeHTTP(w, r)
			return
		}
		// A POST's answer comes on its response. If the client goes away before
		// it (the SDK's server returns then), nobody can receive it: the requests
		// it carried, which know the POST by this header, are cancelled.
		id := strconv.FormatUint(g.posts.seq.Add(1), 10)
		r.Header.Set(postHeader, id)
		stateful.ServeHTTP(w, r)
		g.posts.done(id, r.Context().Err() != nil)
	})
	if o.Token != "" {
		h = bearer(o.Token, h)
	}
	return h
}

// postHeader marks the requests of one POST of a stateful session (see Handler).
const postHeader = "Mcpfsm-Gateway-Post"

// posts are the cancel functions of the front requests in flight, by the POST that
// carried them, and the POSTs whose client went away before a request of theirs
// started (it is cancelled as it starts).
type posts struct {
	seq     atomic.Uint64
	mu      sync.Mutex
	cancels map[string]map[*context.CancelFunc]bool
	gone    map[string]time.Time
}

// track returns ctx, cancelled when the POST that carried req ends with its client
// gone, and a function to call when the request is done.
func (p *posts) track(ctx context.Context, req mcp.Request) (context.Context, func()) {
	extra := req.GetExtra()
	if extra == nil || extra.Header == nil {
		return ctx, func() {}
	}
	id := extra.Header.Get(postHeader)
	if id == "" {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, gone := p.gone[id]; gone {
		cancel()
		return ctx, func() {}
	}
	if p.cancels == nil {
		p.cancels = map[string]map[*context.CancelFunc]bool{}
	}
	if p.cancels[id] == nil {
		p.cancels[id] = map[*context.CancelFunc]bool{}
	}
	key := &cancel
	p.cancels[id][key] = true
	return ctx, func() {
		cancel()
		p.mu.Lock()
		delete(p.cancels[id], key)
		if len(p.cancels[id]) == 0 {
			delete(p.cancels, id)
		}
		p.mu.Unlock()
	}
}

// done ends a POST: if its client went away, its requests are cancelled.
func (p *posts) done(id string, gone bool) {
	if !gone {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.cancels[id] {
		(*c)()
	}
	if len(p.cancels[id]) == 0 {
		// Its request has not started yet (the SDK runs it on a goroutine of its
		// own): it is cancelled as it does. Remembered for a minute.
		if p.gone == nil {
			p.gone = map[string]time.Time{}
		}
		now := time.Now()
		for k, at := range p.gone {
			if now.Sub(at) > time.Minute {
				delete(p.gone, k)
			}
		}
		p.gone[id] = now
	}
}

// bearer requires the token of every request, compared in constant time.
func bearer(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcpfsm-gateway"`)
			http.Error(w, "unauthorized: this gateway wants a bearer token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// NginxHashSessionID returns a session ID generator for replica index (0-based, in the
// order of the upstream's server lines) of count replicas behind nginx's
// `hash $http_mcp_session_id;` (not consistent): every ID it mints is one nginx sends
// to this replica while all are up, so a session stays where it was created. nginx
// picks peer ((crc32(key) >> 16) & 0x7fff) % count for an upstream of equal weights;
// a request without the header (initialize) goes round robin.
func NginxHashSessionID(index, count int) (func() string, error) {
	if count < 1 || index < 0 || index >= count {
		return nil, fmt.Errorf("replica %d of %d: want 0 <= index < count", index, count)
	}
	return func() string {
		for {
			id := rand.Text()
			if int((crc32.ChecksumIEEE([]byte(id))>>16)&0x7fff)%count == index {
				return id
			}
		}
	}, nil
}

// ParseReplica reads "I/N" (1-based I, as people count replicas) into a 0-based
// index and a count.
func ParseReplica(s string) (index, count int, err error) {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			a, e1 := strconv.Atoi(s[:i])
			b, e2 := strconv.Atoi(s[i+1:])
			if e1 != nil || e2 != nil || a < 1 || a > b {
				break
			}
			return a - 1, b, nil
		}
	}
	return 0, 0, fmt.Errorf("replica %q: want I/N, such as 1/2", s)
}
