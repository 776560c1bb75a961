package gateway

import (
	"crypto/rand"
	"crypto/subtle"
	"fmt"
	"hash/crc32"
	"net/http"
	"strconv"
	"strings"
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
		if r.Method == http.MethodDelete {
			// The client ends its session: its requests in flight are cancelled
			// (the SDK's close of the session, and the DELETE, wait for them).
			if id := r.Header.Get("Mcp-Session-Id"); id != "" {
				g.inflight.sessionDeleted(id)
			}
		}
		if r.Method != http.MethodPost {
			stateful.ServeHTTP(w, r)
			return
		}
		// A POST's answer comes on its response. If the client goes away before
		// it (the SDK's server returns then), nobody can receive it: the requests
		// it carried, which know the POST by this header, are cancelled.
		id := strconv.FormatUint(g.inflight.posts.Add(1), 10)
		r.Header.Set(postHeader, id)
		stateful.ServeHTTP(w, r)
		g.inflight.postDone(id, r.Context().Err() != nil)
	})
	if o.Token != "" {
		h = bearer(o.Token, h)
	}
	return h
}

// postHeader marks the requests of one POST of a stateful session (see Handler).
const postHeader = "Mcpfsm-Gateway-Post"

// bearer requires the token of every request, compared in constant time.
func bearer(token string, next http.Handler) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The scheme's name is case-insensitive (RFC 9110, 11.1); the token is
		// compared in constant time.
		scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
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
