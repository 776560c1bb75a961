package transport

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/authtest"
	"github.com/modelcontextprotocol/go-sdk/auth"
)

// slowRoundTripper delays each request by its delay: a loaded machine, a slow
// network.
type slowRoundTripper struct {
	base  http.RoundTripper
	delay time.Duration
}

func (s slowRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return s.base.RoundTrip(r)
}

// TestAuthAfterTheDialDeadline: a dial whose server refused a request only after
// the dial's deadline (Options.Deadline; a loaded machine, a second request the
// go-sdk sends after a first failed, as it falls back from server/discover to
// initialize) took that deadline as passed, bounding nothing, and gave the
// authorization three quarters of what the caller's context had left: with a
// fetcher that does not return, the dial returned 15 s past its deadline (seen as
// TestAuthWithinDialDeadline and TestFetcherIgnoringItsContext failing in a full
// run). The deadline bounds the dial's own requests for as long as the dial is
// under way: such an authorization fails at once.
func TestAuthAfterTheDialDeadline(t *testing.T) {
	srv := authServer(t, authtest.Options{}, false)
	release := make(chan struct{})
	defer close(release)
	deaf := func(context.Context, *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		<-release
		return nil, errors.New("the user went away")
	}
	cfg := authConfig(srv, &Auth{Fetcher: deaf, RedirectURL: redirect}, false)
	cfg.HTTP.Client = &http.Client{Transport: slowRoundTripper{http.DefaultTransport, 300 * time.Millisecond}}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second) // as in TestFetcherIgnoringItsContext: later than the dial's
	defer cancel()
	const within = 100 * time.Millisecond // passed before the server's first answer
	start := time.Now()
	s, err := Dial(ctx, cfg, Options{Deadline: start.Add(within)})
	if err == nil {
		_ = s.Close(ctx)
		t.Fatal("dial succeeded")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the dial returned after %v, its deadline %v (the server's answers came 300ms after each request)", d, within)
	}
}
