package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
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
	rt := &lifeRoundTripper{base: base, life: life, host: "h:1", headers: map[string]string{
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
