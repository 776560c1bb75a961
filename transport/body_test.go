package transport

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// heapPeak samples the live heap until stop is called, and returns the
// highest sample.
func heapPeak() (stop func() uint64) {
	done := make(chan struct{})
	peak := make(chan uint64, 1)
	go func() {
		var max uint64
		var ms runtime.MemStats
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&ms)
			max = maxOf(max, ms.HeapAlloc)
			select {
			case <-tick.C:
			case <-done:
				peak <- max
				return
			}
		}
	}()
	return func() uint64 {
		close(done)
		return <-peak
	}
}

func maxOf(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// TestEndlessResponseBody (issue 17, item 4): a server that answers with a
// body that never ends (a 200 JSON answer, a 400 error page) makes the dial
// fail once MaxResponseBody bytes (MaxErrorBody of the error page) are read,
// within its context, with bounded memory.
func TestEndlessResponseBody(t *testing.T) {
	// Stop sending at 3× the cap: without a cap the client would read it all.
	const hardStop = 3 * MaxResponseBody
	for _, status := range []int{http.StatusOK, http.StatusBadRequest} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			var most atomic.Int64 // the most one answer sent
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				chunk := []byte(`{"jsonrpc":"2.0","id":1,"result":{"x":"` + strings.Repeat("x", 64<<10))
				var sent int64
				defer func() {
					for old := most.Load(); sent > old && !most.CompareAndSwap(old, sent); old = most.Load() {
					}
				}()
				for sent < hardStop {
					n, err := w.Write(chunk)
					sent += int64(n)
					if err != nil {
						return
					}
					chunk = chunk[:0]
					chunk = append(chunk, strings.Repeat("x", 64<<10)...)
				}
			}))
			defer srv.Close()
			runtime.GC()
			stop := heapPeak()
			const timeout = 10 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			start := time.Now()
			s, err := Dial(ctx, Config{Name: "endless", HTTP: &HTTP{URL: srv.URL}}, Options{})
			d := time.Since(start)
			peak := stop()
			if err == nil {
				s.Close(ctx)
				t.Fatal("Dial succeeded")
			}
			srv.Close() // its handlers have returned
			t.Logf("Dial failed after %v, the server sent at most %d MiB per answer, peak heap %d MiB: %v", d, most.Load()>>20, peak>>20, err)
			if ctx.Err() != nil {
				t.Errorf("Dial took its whole context (%v)", d)
			}
			// The server's writes stop once the client stops reading: what it
			// sent is the cap, plus what the sockets buffer.
			limit := int64(MaxResponseBody)
			if status != http.StatusOK {
				limit = MaxErrorBody
				// The SDK copies an error body it read; capped at a
				// megabyte, the copies stay small (uncapped they took
				// 276 MiB at the peak).
				if peak > 64<<20 {
					t.Errorf("peak heap %d MiB reading an endless error page, want at most 64", peak>>20)
				}
			}
			if got := most.Load(); got > limit+16<<20 {
				t.Errorf("the server sent %d MiB before the client stopped reading, want about %d", got>>20, limit>>20)
			}
			if status == http.StatusOK && !strings.Contains(err.Error(), ErrResponseTooLarge.Error()) {
				t.Errorf("Dial = %v, want it to say the body is too large", err)
			}
		})
	}
}

// TestResponseBodyCap: the cap fails a read past it, a body of exactly the
// cap is read whole, event streams are not capped in total, and an error
// page is capped at MaxErrorBody.
func TestResponseBodyCap(t *testing.T) {
	life, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, tc := range []struct {
		size        int
		contentType string
		status      int
		maxBody     int64
		tooLarge    bool
	}{
		{100, "application/json", 200, 100, false},
		{101, "application/json", 200, 100, true},
		{1000, "text/event-stream; charset=utf-8", 200, 100, false},
		{101, "text/html", 502, 100, true},
		{MaxErrorBody, "text/html", 502, MaxResponseBody, false},
		{MaxErrorBody + 1, "text/html", 502, MaxResponseBody, true},
		{MaxErrorBody + 1, "application/json", 200, MaxResponseBody, false},
	} {
		rt := &lifeRoundTripper{base: bodyRT{tc.size, tc.contentType, tc.status}, life: life, maxBody: tc.maxBody}
		req, _ := http.NewRequest("POST", "http://h/mcp", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		buf := make([]byte, 7)
		for {
			m, err := resp.Body.Read(buf)
			n += m
			if err != nil {
				if got := errors.Is(err, ErrResponseTooLarge); got != tc.tooLarge {
					t.Errorf("%d bytes of %s (%d): read error %v after %d bytes", tc.size, tc.contentType, tc.status, err, n)
				}
				break
			}
		}
		if !tc.tooLarge && n != tc.size {
			t.Errorf("%d bytes of %s: read %d", tc.size, tc.contentType, n)
		}
		resp.Body.Close()
	}
}

// bodyRT answers with a body of size bytes.
type bodyRT struct {
	size        int
	contentType string
	status      int
}

func (b bodyRT) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: b.status, Header: http.Header{"Content-Type": {b.contentType}},
		Body: readCloser{strings.NewReader(strings.Repeat("a", b.size))}, Request: r}, nil
}

type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }
