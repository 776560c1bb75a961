package transport

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// stubRoundTripper answers every request at once with 200 and a short body.
type stubRoundTripper struct{}

func (stubRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
}

// BenchmarkRoundTripOverhead isolates what a session adds to each HTTP request: the
// same POST answered at once by a stub transport, sent directly (direct) and through
// the session's lifeRoundTripper, under a context with a place for its status, as a
// call of an HTTP session sends it (session). session's ns/op less direct's is the
// overhead per request.
func BenchmarkRoundTripOverhead(b *testing.B) {
	life, cancel := context.WithCancel(context.Background())
	defer cancel()
	send := func(b *testing.B, rt http.RoundTripper, ctx func() context.Context) {
		b.ReportAllocs()
		for b.Loop() {
			req, err := http.NewRequestWithContext(ctx(), http.MethodPost, "http://127.0.0.1:1/mcp", strings.NewReader("{}"))
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := rt.RoundTrip(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	b.Run("direct", func(b *testing.B) {
		send(b, stubRoundTripper{}, context.Background)
	})
	b.Run("session", func(b *testing.B) {
		rt := &lifeRoundTripper{base: stubRoundTripper{}, life: life, origin: "http://127.0.0.1:1", maxBody: MaxResponseBody}
		send(b, rt, func() context.Context {
			ctx, _ := withStatus(context.Background())
			return ctx
		})
	})
}
