package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
)

// newHTTPClient returns the client a session uses for h: the caller's client
// (or a private transport) wrapped in a lifeRoundTripper. own is the private
// transport, nil if the caller gave a client.
func newHTTPClient(life context.Context, h *HTTP) (client *http.Client, own *http.Transport) {
	var base http.RoundTripper
	if h.Client != nil {
		c := *h.Client // a shallow copy: the caller's client is not modified
		client = &c
		base = h.Client.Transport
		if base == nil {
			base = http.DefaultTransport
		}
	} else {
		if dt, ok := http.DefaultTransport.(*http.Transport); ok {
			own = dt.Clone()
		} else {
			own = &http.Transport{Proxy: http.ProxyFromEnvironment}
		}
		client = &http.Client{}
		base = own
	}
	host := ""
	if u, err := url.Parse(h.URL); err == nil {
		host = u.Host
	}
	client.Transport = &lifeRoundTripper{base: base, life: life, headers: h.Headers, host: host}
	return client, own
}

// lifeRoundTripper ties every request to the session's life: when the session
// is torn down by force, every request in flight (a call's POST, the event
// stream's GET, the closing DELETE) is aborted. It also sets the configured
// headers on requests for the configured host (not on redirects elsewhere),
// over any the client set (an Authorization header wins over URL userinfo),
// except the protocol's own headers, which the SDK owns.
type lifeRoundTripper struct {
	base    http.RoundTripper
	life    context.Context
	headers map[string]string
	host    string
}

// RoundTrip implements http.RoundTripper.
func (rt *lifeRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	stop := context.AfterFunc(rt.life, func() { cancel(context.Cause(rt.life)) })
	release := func() {
		stop()
		cancel(nil)
	}
	// A RoundTripper must not change the request it is given: the headers are set on
	// a deep copy, and without headers to set a shallow one carries the new context.
	var r *http.Request
	if len(rt.headers) > 0 && req.URL.Host == rt.host {
		r = req.Clone(ctx)
		for k, v := range rt.headers {
			if !sdkHeaders[http.CanonicalHeaderKey(k)] {
				r.Header.Set(k, v)
			}
		}
	} else {
		r = req.WithContext(ctx)
	}
	rec, _ := req.Context().Value(statusKey{}).(*answers)
	post := rec != nil && req.Method == http.MethodPost
	if post {
		rec.sent.Store(true) // under way: from now on it may reach the server
	}
	resp, err := rt.base.RoundTrip(r)
	if err != nil {
		if post && errors.Is(err, syscall.ECONNREFUSED) {
			rec.sent.Store(false)
		}
		release()
		return nil, err
	}
	if rec != nil && (resp.StatusCode < 200 || resp.StatusCode > 299) {
		rec.status.Store(int32(resp.StatusCode))
		if post && resp.StatusCode == http.StatusNotFound {
			rec.sent.Store(false) // the server does not know the session: it ran nothing
		}
	}
	resp.Body = &releasingBody{ReadCloser: resp.Body, release: release}
	return resp, nil
}

// sdkHeaders are the headers the SDK sets for the protocol's sake.
var sdkHeaders = map[string]bool{
	"Accept":               true,
	"Content-Type":         true,
	"Last-Event-Id":        true,
	"Mcp-Method":           true,
	"Mcp-Name":             true,
	"Mcp-Protocol-Version": true,
	"Mcp-Session-Id":       true,
}

// statusKey keys the context value in which a request of the session
// records what the HTTP answers to it said (see Error.HTTPStatus and
// Error.Sent): the SDK sends a call's HTTP requests with the call's
// context.
type statusKey struct{}

// answers is what the HTTP answers to one request of the session said.
type answers struct {
	status atomic.Int32 // the status of a non-2xx answer, if any
	sent   atomic.Bool  // a POST may have reached the server (see Error.Sent)
}

// withStatus returns ctx with a place for what the HTTP answers say.
func withStatus(ctx context.Context) (context.Context, *answers) {
	rec := new(answers)
	return context.WithValue(ctx, statusKey{}, rec), rec
}

// releasingBody releases its request's context when it is closed.
type releasingBody struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

// Close closes the body and releases the request's context.
func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}
