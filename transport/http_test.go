package transport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type recordingRT struct {
	got chan *http.Request
}

func (rt recordingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	rt.got <- r
	if r.URL.Path == "/block" {
		<-r.Context().Done()
		return nil, context.Cause(r.Context())
	}
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
}

func TestLifeRoundTripper(t *testing.T) {
	life, kill := context.WithCancelCause(context.Background())
	defer kill(nil)
	base := recordingRT{got: make(chan *http.Request, 4)}
	rt := &lifeRoundTripper{base: base, life: life, origin: "http://h:1", maxBody: MaxResponseBody, headers: map[string]string{
		"Authorization":  "Bearer t",
		"mcp-session-id": "mine",
	}}

	req, _ := http.NewRequest("POST", "http://h:1/mcp", nil)
	req.Header.Set("Authorization", "Basic x")
	req.Header.Set("Mcp-Session-Id", "sdk")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got := <-base.got
	if a := got.Header.Get("Authorization"); a != "Bearer t" {
		t.Errorf("Authorization %q, want the configured one", a)
	}
	if id := got.Header.Get("Mcp-Session-Id"); id != "sdk" {
		t.Errorf("Mcp-Session-Id %q, want the SDK's", id)
	}
	if req.Header.Get("Authorization") != "Basic x" {
		t.Error("the caller's request was modified")
	}

	req, _ = http.NewRequest("GET", "http://elsewhere/mcp", nil)
	resp, err = rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if a := (<-base.got).Header.Get("Authorization"); a != "" {
		t.Errorf("the header went to another host: %q", a)
	}

	// Ending the life aborts requests in flight.
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("GET", "http://h:1/block", nil)
		_, err := rt.RoundTrip(req)
		done <- err
	}()
	<-base.got
	errForced := errors.New("forced")
	kill(errForced)
	select {
	case err := <-done:
		if !errors.Is(err, errForced) {
			t.Errorf("aborted request: %v, want the life's cause", err)
		}
	case <-time.After(callTimeout):
		t.Fatal("the request was not aborted")
	}
}

// TestHeadersOnlyToTheConfiguredOrigin (issue 17, item 8): the configured
// headers go to the configured URL's scheme, host and port only: never on a
// downgrade to http on the same host and port, nor to another port or host.
func TestHeadersOnlyToTheConfiguredOrigin(t *testing.T) {
	life, kill := context.WithCancelCause(context.Background())
	defer kill(nil)
	base := recordingRT{got: make(chan *http.Request, 1)}
	rt := &lifeRoundTripper{base: base, life: life, origin: originOf(mustParse(t, "https://Example.com/mcp")),
		maxBody: MaxResponseBody, headers: map[string]string{"Authorization": "Bearer t"}}
	for _, tc := range []struct {
		url  string
		sent bool
	}{
		{"https://example.com/mcp", true},
		{"https://EXAMPLE.com:443/other", true},
		{"http://example.com/mcp", false},
		{"http://example.com:443/mcp", false},
		{"https://example.com:8443/mcp", false},
		{"https://elsewhere.com/mcp", false},
	} {
		req, _ := http.NewRequest("POST", tc.url, nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := (<-base.got).Header.Get("Authorization") != ""; got != tc.sent {
			t.Errorf("%s: Authorization sent %v, want %v", tc.url, got, tc.sent)
		}
	}
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// sniffListener hands each connection to the TLS or the plain HTTP server on
// one port, by its first byte (a TLS handshake starts with 0x16): so that an
// https URL can redirect to http on the same host and port.
type sniffListener struct {
	net.Listener
	tls, plain chan net.Conn
	done       chan struct{} // closed once the listener is closed
}

func (l *sniffListener) serve() {
	defer close(l.done)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return
		}
		wg.Go(func() {
			br := bufio.NewReader(c)
			_ = c.SetReadDeadline(time.Now().Add(callTimeout))
			first, err := br.Peek(1)
			_ = c.SetReadDeadline(time.Time{})
			if err != nil {
				c.Close()
				return
			}
			to := l.plain
			if first[0] == 0x16 {
				to = l.tls
			}
			select {
			case to <- &peekedConn{Conn: c, r: br}:
			case <-time.After(callTimeout):
				c.Close()
			}
		})
	}
}

type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// chanListener accepts the connections sent on its channel until done is
// closed.
type chanListener struct {
	ch   chan net.Conn
	done chan struct{}
	addr net.Addr
}

func (l chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l chanListener) Close() error   { return nil }
func (l chanListener) Addr() net.Addr { return l.addr }

// TestNoHeadersOnDowngrade: an https MCP endpoint that redirects to http on
// the same host and port gets the configured Authorization; the http request
// does not.
func TestNoHeadersOnDowngrade(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl := &sniffListener{Listener: ln, tls: make(chan net.Conn), plain: make(chan net.Conn), done: make(chan struct{})}
	go sl.serve()
	plainAuth := make(chan string, 16)
	plain := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plainAuth <- r.Header.Get("Authorization")
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	plain.Listener = chanListener{sl.plain, sl.done, ln.Addr()}
	plain.Start()
	tlsAuth := make(chan string, 16)
	secure := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tlsAuth <- r.Header.Get("Authorization")
		http.Redirect(w, r, "http://"+ln.Addr().String()+"/plain", http.StatusTemporaryRedirect)
	}))
	secure.Listener = chanListener{sl.tls, sl.done, ln.Addr()}
	secure.StartTLS()
	defer func() {
		ln.Close()
		<-sl.done
		secure.Close()
		plain.Close()
	}()

	cfg := Config{Name: "downgrade", HTTP: &HTTP{
		URL:     "https://" + ln.Addr().String() + "/mcp",
		Headers: map[string]string{"Authorization": "Bearer hdrSECRETmarker"},
		Client:  secure.Client(),
	}}
	if s, err := Dial(callCtx(t), cfg, Options{}); err == nil {
		s.Close(callCtx(t))
		t.Fatal("Dial succeeded")
	}
	select {
	case got := <-tlsAuth:
		if got != "Bearer hdrSECRETmarker" {
			t.Errorf("the https endpoint got Authorization %q, want the configured one", got)
		}
	default:
		t.Fatal("the https endpoint got no request")
	}
	select {
	case got := <-plainAuth:
		if got != "" {
			t.Errorf("the http redirect target got Authorization %q in cleartext", got)
		}
	default:
		t.Fatal("the redirect was not followed: the test proves nothing")
	}
}

// TestHTTPAnswerOutlivesTheCaller: a JSON answer (not an event stream) whose body is
// still coming when its caller gives up is read on, for up to answerGrace. The
// go-sdk's client fails the whole session when it cannot read a JSON answer's body:
// cut at the caller's deadline, it broke the session under every other call, and the
// connection counted a failure.
func TestHTTPAnswerOutlivesTheCaller(t *testing.T) {
	srv := testserver.New(testserver.Options{})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{JSONResponse: true})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if bytes.Contains(body, []byte(`"tools/call"`)) {
				w = &lateBody{ResponseWriter: w, delay: 500 * time.Millisecond}
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close) // after the session's close: its event stream holds a handler
	e := newEnds()
	s := dial(t, Config{Name: "late-json", HTTP: &HTTP{URL: hs.URL}}, e.options())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := echo(ctx, s, "late"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the late call: %v, want its deadline", err)
	}
	if got, err := echo(callCtx(t), s, "next"); err != nil || got != "next" {
		t.Errorf("the next call on the session: %q, %v", got, err)
	}
	select {
	case err := <-e.ch:
		t.Errorf("the session ended: %v", err)
	default:
	}
}

// lateBody sends its answer's headers and first byte at once, the rest after delay.
type lateBody struct {
	http.ResponseWriter
	delay time.Duration
	late  bool
}

func (w *lateBody) Write(p []byte) (int, error) {
	if w.late || len(p) < 2 {
		return w.ResponseWriter.Write(p)
	}
	w.late = true
	n, err := w.ResponseWriter.Write(p[:1])
	if err != nil {
		return n, err
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
	time.Sleep(w.delay)
	m, err := w.ResponseWriter.Write(p[1:])
	return n + m, err
}

// TestHTTPConnectionReusedAfterTheCallersEnd: a call whose caller's context ends as
// it returns (a deferred cancel, as most callers have, and as package mcpfsm's call
// path has for every call) leaves its HTTP connection to the next call. The go-sdk's
// client reads an answer's event stream to its end after the answer, and that read,
// cut by the caller's end, closed the connection: about one call in 17 opened a new
// one.
//
// The go-sdk's client hands the call its answer before it reads the rest of the
// stream (the server's end of it): a next call made at once may find the connection
// still in use and dial another (seen under load, one call in 100 to 200). So each
// call waits for the end of the streams before it, which the go-sdk reads on its own
// goroutine; a stream cut by its caller's end closed its connection before that.
func TestHTTPConnectionReusedAfterTheCallersEnd(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	var dials atomic.Int64
	d := &net.Dialer{}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	posts := newPostBodies(tr)
	s := dial(t, Config{Name: "reuse", HTTP: &HTTP{URL: h.URL(), Client: &http.Client{Transport: posts}}}, Options{})
	const calls = 300
	posts.ended(t)
	before := dials.Load()
	for i := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		got, err := echo(ctx, s, "x")
		cancel()
		if err != nil || got != "x" {
			t.Fatalf("call %d: %q, %v", i, got, err)
		}
		posts.ended(t)
	}
	// The event stream's GET holds one connection; the calls share another. A
	// connection the server or the pool dropped for its own reasons may add one.
	if n := dials.Load() - before; n > 2 {
		t.Errorf("%d calls opened %d connections, want at most 2", calls, n)
	}
	if n := posts.cut.Load(); n > 0 {
		t.Errorf("%d answers' event streams were closed before their end", n)
	}
}

// postBodies is an http.RoundTripper over base that knows when the bodies of the
// answers to its POSTs have all been closed, and counts the event streams among
// them closed before their end.
type postBodies struct {
	base http.RoundTripper
	cut  atomic.Int64
	mu   sync.Mutex
	open int
	none chan struct{} // closed while open is 0
}

func newPostBodies(base http.RoundTripper) *postBodies {
	p := &postBodies{base: base, none: make(chan struct{})}
	close(p.none)
	return p
}

// RoundTrip implements http.RoundTripper.
func (p *postBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := p.base.RoundTrip(r)
	if err != nil || r.Method != http.MethodPost {
		return resp, err
	}
	p.mu.Lock()
	if p.open == 0 {
		p.none = make(chan struct{})
	}
	p.open++
	p.mu.Unlock()
	resp.Body = &postBody{ReadCloser: resp.Body, p: p, stream: isEventStream(resp.Header.Get("Content-Type"))}
	return resp, nil
}

// ended waits until every POST's answer body has been closed.
func (p *postBodies) ended(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	none := p.none
	p.mu.Unlock()
	select {
	case <-none:
	case <-time.After(callTimeout):
		t.Fatalf("an answer's body was not closed within %v", callTimeout)
	}
}

// postBody is the body of an answer to a POST of postBodies.
type postBody struct {
	io.ReadCloser
	p      *postBodies
	stream bool // an event stream
	eof    atomic.Bool
	once   sync.Once
}

// Read implements io.Reader.
func (b *postBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

// Close implements io.Closer.
func (b *postBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() {
		if b.stream && !b.eof.Load() {
			b.p.cut.Add(1)
		}
		b.p.mu.Lock()
		if b.p.open--; b.p.open == 0 {
			close(b.p.none)
		}
		b.p.mu.Unlock()
	})
	return err
}
