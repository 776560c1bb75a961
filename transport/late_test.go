package transport

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// fakeConn is a connection whose reads are the messages the test queues.
type fakeConn struct {
	mcp.Connection
	in chan jsonrpc.Message
}

func (c *fakeConn) Read(ctx context.Context) (jsonrpc.Message, error) { return <-c.in, nil }
func (c *fakeConn) Write(context.Context, jsonrpc.Message) error      { return nil }
func (c *fakeConn) Close() error                                      { return nil }

type finishedCount struct{ n atomic.Int32 }

func (f *finishedCount) ServerFinished() { f.n.Add(1) }

// lateSession returns a session whose end is its own (nothing reports it) on a
// connection of messages handed to read, which reads each through the session's
// endConn.
func lateSession(t *testing.T) (*Session, *endConn, func(jsonrpc.Message)) {
	s := &Session{watched: make(chan struct{})}
	s.closing.Store(true) // the end is ours: nothing reports it
	fc := &fakeConn{in: make(chan jsonrpc.Message, 8)}
	ec := &endConn{Connection: fc, s: s}
	s.lt = &lifeTransport{end: ec}
	return s, ec, func(msg jsonrpc.Message) {
		t.Helper()
		fc.in <- msg
		if _, err := ec.Read(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// rpcID is the JSON-RPC ID n.
func rpcID(n int64) jsonrpc.ID { v, _ := jsonrpc.MakeID(float64(n)); return v }

// TestLateAnswer: a request whose caller gave up (its context ended, carrying a
// Finished) is told finished once, when the server's answer to it is read, but
// only once every request of the server's read before that answer has been
// answered (its handler, which may be attributing it, has returned); at once if
// the answer was read before the request returned, or if the request was never
// written; never without an answer while the session lives on; once the session's
// connection is closed by the SDK (no handler runs), but not by Session.down's own
// close.
func TestLateAnswer(t *testing.T) {
	s, ec, read := lateSession(t)
	// send writes request n under a context that the caller then gives up on, and
	// returns the Finished told about it.
	send := func(n int64, answerFirst bool) *finishedCount {
		t.Helper()
		f := &finishedCount{}
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), FinishedKey{}, Finished(f)))
		sctx, rec := withStatus(ctx)
		if n > 0 {
			if err := ec.Write(sctx, &jsonrpc.Request{ID: rpcID(n), Method: "tools/call"}); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		if answerFirst {
			read(&jsonrpc.Response{ID: rpcID(n)})
		}
		s.doneAfter(ctx, rec)
		return f
	}

	// Answered while a request of the server's, read before the answer, is
	// being handled: told once that one is answered.
	f := send(1, false)
	read(&jsonrpc.Request{ID: rpcID(100), Method: "sampling/createMessage"})
	read(&jsonrpc.Response{ID: rpcID(1)})
	if f.n.Load() != 0 {
		t.Fatal("told while a request of the server's read before the answer was unanswered")
	}
	if err := ec.Write(context.Background(), &jsonrpc.Response{ID: rpcID(100)}); err != nil {
		t.Fatal(err)
	}
	if f.n.Load() != 1 {
		t.Fatalf("told %d times once the server's request was answered, want 1", f.n.Load())
	}

	// Answered before the request returned: told as it returns.
	if f := send(2, true); f.n.Load() != 1 {
		t.Fatalf("answer read before the request returned: told %d times, want 1", f.n.Load())
	}
	// Never written: the server never had it.
	if f := send(0, false); f.n.Load() != 1 {
		t.Fatalf("a request never written: told %d times, want 1", f.n.Load())
	}
	// No answer: not told; the answer of another request says nothing of it.
	f = send(3, false)
	read(&jsonrpc.Response{ID: rpcID(4)})
	if f.n.Load() != 0 {
		t.Fatal("told with no answer to its request")
	}
	// A request the caller did not give up on is forgotten as it returns.
	sctx, rec := withStatus(context.Background())
	if err := ec.Write(sctx, &jsonrpc.Request{ID: rpcID(5), Method: "tools/call"}); err != nil {
		t.Fatal(err)
	}
	s.doneAfter(context.Background(), rec)
	if _, ok := s.awaiting.Load(rpcID(5)); ok {
		t.Error("a request answered or not given up on is still awaited")
	}

	// The session's end: the close Session.down makes itself (handlers may
	// still run) tells nothing; the SDK's, made once no handler runs, tells the
	// request without an answer; one given up on later is told at once.
	s.late.downClose.Add(1)
	_ = ec.Close()
	if f.n.Load() != 0 {
		t.Fatal("told at down's own close of the connection, handlers maybe running")
	}
	_ = ec.Close()
	if f.n.Load() != 1 {
		t.Fatalf("told %d times once the SDK closed its connection, want 1", f.n.Load())
	}
	if f := send(6, false); f.n.Load() != 1 {
		t.Fatalf("given up on after the session ended: told %d times, want 1", f.n.Load())
	}
}

// TestLateAnswersWaitingBounded: answers to requests given up on, read while a
// request of the server's is unanswered, wait for it; a request the go-sdk never
// answers (one reusing the ID of another in flight, which it drops) left them
// waiting for the session's life, every later one added: they are bounded as the
// watches are (maxLate), the oldest dropped (not told: the caller's bound then
// holds, the gateway's cutLinger).
func TestLateAnswersWaitingBounded(t *testing.T) {
	s, ec, read := lateSession(t)
	read(&jsonrpc.Request{ID: rpcID(1 << 40), Method: "sampling/createMessage"}) // never answered
	for n := int64(1); n <= 3*maxLate; n++ {
		f := &finishedCount{}
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), FinishedKey{}, Finished(f)))
		sctx, rec := withStatus(ctx)
		if err := ec.Write(sctx, &jsonrpc.Request{ID: rpcID(n), Method: "tools/call"}); err != nil {
			t.Fatal(err)
		}
		cancel()
		s.doneAfter(ctx, rec)
		read(&jsonrpc.Response{ID: rpcID(n)})
	}
	s.late.mu.Lock()
	n := len(s.late.ready)
	s.late.mu.Unlock()
	if n > maxLate {
		t.Errorf("%d answers wait for the server's request to be answered, more than %d", n, maxLate)
	}
}
