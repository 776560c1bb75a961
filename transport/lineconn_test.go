package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// describe renders a message, or a read's error, so that two reads can be
// compared: what a session would see of it.
func describe(msg jsonrpc.Message, err error) string {
	switch {
	case errors.Is(err, io.EOF):
		return "EOF"
	case err != nil:
		return "error"
	}
	switch m := msg.(type) {
	case *jsonrpc.Request:
		return fmt.Sprintf("request id=%v method=%q params=%s", m.ID.Raw(), m.Method, m.Params)
	case *jsonrpc.Response:
		var e any
		if m.Error != nil {
			var je *jsonrpc.Error
			if errors.As(m.Error, &je) {
				e = *je
			} else {
				e = m.Error.Error()
			}
		}
		return fmt.Sprintf("response id=%v result=%s error=%+v", m.ID.Raw(), m.Result, e)
	}
	return fmt.Sprintf("%T", msg)
}

// readAll reads c until EOF, or until a read after an error waits a second: a
// stream that no longer frames messages ends the connection's reader, as the
// SDK's does. (The second is generous: the next message of a stream read
// from memory comes within microseconds, but a loaded machine may not run the
// reader for a while.)
func readAll(t *testing.T, c mcp.Connection) []string {
	t.Helper()
	var got []string
	wait := 5 * time.Second
	for len(got) < 100 {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		msg, err := c.Read(ctx)
		stalled := err != nil && ctx.Err() != nil // before cancel, which sets ctx.Err
		cancel()
		if stalled {
			got = append(got, "stalled")
			break
		}
		got = append(got, describe(msg, err))
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			wait = time.Second
		}
	}
	return got
}

// readBoth reads the SDK's connection and ours side by side (each may wait its
// second at the end), and returns what each read.
func readBoth(t *testing.T, sdk, ours mcp.Connection) (want, got []string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		want = readAll(t, sdk)
	}()
	got = readAll(t, ours)
	<-done
	return want, got
}

// TestLineConnDecodesAsTheSDK: a stdio server's output, read by lineConn and by
// the go-sdk's own stdio connection, gives the same messages and errors, in the
// same order.
func TestLineConnDecodesAsTheSDK(t *testing.T) {
	long := `{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"` + strings.Repeat("x", maxLineLength) + `"}}` + "\n"
	deep := `{"jsonrpc":"2.0","id":1,"result":` + strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1) + "}\n"
	for _, tc := range []struct{ name, stream string }{
		{"messages", `{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}` + "\n" +
			`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}` + "\n" +
			`{"jsonrpc":"2.0","id":"a","method":"ping"}` + "\n" +
			`{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"no","data":{"x":1}}}` + "\n"},
		{"blank lines, CRLF, a value over lines", "\n\r\n" + `{"jsonrpc":"2.0",` + "\n" + `"id":1,"result":{}}` + "\r\n" + `  {"jsonrpc":"2.0","id":3,"result":null}` + "\n"},
		{"a batch", `[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":7,"method":"b","params":[1]}]` + "\n" + `{"jsonrpc":"2.0","id":1,"result":{}}` + "\n"},
		{"an empty batch", "[]\n" + `{"jsonrpc":"2.0","id":1,"result":{}}` + "\n"},
		{"a batch with an ID twice", `[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","id":1,"method":"b"}]` + "\n" + `{"jsonrpc":"2.0","id":1,"result":{}}` + "\n"},
		{"a batch with an ID still unanswered", `[{"jsonrpc":"2.0","id":1,"method":"a"}]` + "\n" + `[{"jsonrpc":"2.0","id":1,"method":"b"}]` + "\n" + `{"jsonrpc":"2.0","id":1,"result":{}}` + "\n"},
		{"a batch with a bad message", `[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"1.0","id":1,"result":{}}]` + "\n" + `{"jsonrpc":"2.0","id":1,"result":{}}` + "\n"},
		{"bad messages then a good one", `{"jsonrpc":"1.0","id":1,"result":{}}` + "\n" + `{"jsonrpc":"2.0","result":{}}` + "\n" +
			`{"jsonrpc":"2.0","id":{},"result":{}}` + "\n" + `{"jsonrpc":"2.0","id":1,"method":5}` + "\n" + `{"JSONRPC":"2.0","ID":1,"Result":{}}` + "\n" +
			`"text"` + "\n" + `17` + "\n" + `{"jsonrpc":"2.0","id":1,"method":null}` + "\n" + `{"jsonrpc":"2.0","id":1.5,"result":{}}` + "\n" + `{"jsonrpc":"2.0","id":1,"result":{}}` + "\n"},
		{"trailing data", `{"jsonrpc":"2.0","id":1,"result":{}} x` + "\n"},
		{"two values on a line", `{"jsonrpc":"2.0","id":1,"result":{}}{"jsonrpc":"2.0","id":2,"result":{}}` + "\n"},
		{"not JSON", "hello\n"},
		{"cut off", `{"jsonrpc":"2.0","id":1,"res`},
		{"too deep", deep + `{"jsonrpc":"2.0","id":1,"result":{}}` + "\n"},
		{"too long", long},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sdk, err := (&mcp.IOTransport{Reader: io.NopCloser(strings.NewReader(tc.stream)), Writer: nopWriteCloser{}}).Connect(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer sdk.Close()
			ours := newLineConn(io.NopCloser(strings.NewReader(tc.stream)), nopWriteCloser{}, nil)
			defer ours.Close()
			want, got := readBoth(t, sdk, ours)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("lineConn and the SDK's stdio connection read differently (-sdk +lineConn):\n%s", diff)
			}
		})
	}
}

type nopWriteCloser struct{}

func (nopWriteCloser) Write(b []byte) (int, error) { return len(b), nil }
func (nopWriteCloser) Close() error                { return nil }

// sdkDecodeLine is what the go-sdk's stdio connection makes of one JSON value
// read: a batch if it is an array, else one message (mcp's readBatch).
func sdkDecodeLine(data []byte) ([]jsonrpc.Message, error) {
	var batch []json.RawMessage
	if err := json.Unmarshal(data, &batch); err == nil {
		if len(batch) == 0 {
			return nil, errors.New("empty batch")
		}
		var msgs []jsonrpc.Message
		for _, raw := range batch {
			msg, err := jsonrpc.DecodeMessage(raw)
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, msg)
		}
		return msgs, nil
	}
	msg, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		return nil, err
	}
	return []jsonrpc.Message{msg}, nil
}

func describeAll(msgs []jsonrpc.Message, err error) []string {
	if err != nil {
		return []string{"error"}
	}
	var out []string
	for _, m := range msgs {
		out = append(out, describe(m, nil))
	}
	return out
}

// FuzzLineDecode: every JSON value a stdio server can send decodes as the
// go-sdk decodes it.
func FuzzLineDecode(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hi"}]}}`,
		`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info"}}`,
		`{"jsonrpc":"2.0","id":"x","method":"sampling/createMessage","params":{}}`,
		`{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"m","data":null}}`,
		`[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":1,"result":1}]`,
		`{"jsonrpc":"2.0","id":null,"result":{}}`,
		`{"jsonrpc":"2.0","id":1,"method":"","params":null}`,
		`{"jsonrpc":"2.0","Id":1,"id":2,"result":{}}`,
		`{"jsonrpc":"2.0","id":1e3,"result":"\u00e9\\"}`,
		`[]`, `[1]`, `null`, `"2.0"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return // the stream's decoder hands on only valid values
		}
		want := describeAll(sdkDecodeLine(data))
		msgs, _, err := decodeLine(data, false)
		got := describeAll(msgs, err)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%q decodes differently (-sdk +lineConn):\n%s", data, diff)
		}
	})
}

// TestLineConnWrites: a message written is one line, as the SDK writes it; a
// write with a done context writes nothing.
func TestLineConnWrites(t *testing.T) {
	var buf bytes.Buffer
	c := newLineConn(io.NopCloser(strings.NewReader("")), &bufCloser{&buf}, nil)
	defer c.Close()
	id, _ := jsonrpc.MakeID(float64(4))
	req := &jsonrpc.Request{ID: id, Method: "tools/call", Params: json.RawMessage(`{"name":"a<b"}`)}
	if err := c.Write(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	want, _ := jsonrpc.EncodeMessage(req)
	if diff := cmp.Diff(string(want)+"\n", buf.String()); diff != "" {
		t.Errorf("written (-want +got):\n%s", diff)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	buf.Reset()
	if err := c.Write(ctx, req); !errors.Is(err, context.Canceled) || buf.Len() != 0 {
		t.Errorf("a write with a done context: %v, %d bytes written", err, buf.Len())
	}
}

// TestLineConnCloseEndsReads: Close ends a read under way with EOF, and the
// reader goroutine with the stream.
func TestLineConnCloseEndsReads(t *testing.T) {
	pr, pw := io.Pipe()
	c := newLineConn(pr, nopWriteCloser{}, nil)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(context.Background())
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) {
			t.Errorf("a read under way at Close returned %v, want EOF", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read under way at Close did not return")
	}
	pw.Close()
}

type bufCloser struct{ *bytes.Buffer }

func (bufCloser) Close() error { return nil }

// repeatReader repeats one line for ever.
type repeatReader struct {
	line []byte
	off  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.line[r.off:])
		n += c
		r.off = (r.off + c) % len(r.line)
	}
	return n, nil
}

func (*repeatReader) Close() error { return nil }

// BenchmarkStdioRead reads a tool's result from a stdio server, as the
// go-sdk's own stdio connection reads it (sdk) and as lineConn does.
func BenchmarkStdioRead(b *testing.B) {
	line := []byte(`{"jsonrpc":"2.0","id":12,"result":{"content":[{"type":"text","text":"This is a simple text response for testing."}]}}` + "\n")
	for _, tc := range []struct {
		name string
		conn func() mcp.Connection
	}{
		{"sdk", func() mcp.Connection {
			c, _ := (&mcp.IOTransport{Reader: &repeatReader{line: line}, Writer: nopWriteCloser{}}).Connect(context.Background())
			return c
		}},
		{"lineconn", func() mcp.Connection { return newLineConn(&repeatReader{line: line}, nopWriteCloser{}, nil) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := tc.conn()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Read(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			c.Close()
		})
	}
}

// TestLineConnAnswersBatchesAsTheSDK: the responses to a batch of requests from the
// server are written as the go-sdk's stdio connection writes them: one array, once
// all are written, in the batch's order; other messages one per line.
func TestLineConnAnswersBatchesAsTheSDK(t *testing.T) {
	// (A notification in the batch would make the SDK's connection wait for its
	// answer too, and never write the batch's; lineConn answers the requests.)
	stream := `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":"b","method":"ping"}]` + "\n"
	written := func(c mcp.Connection, buf *bytes.Buffer) string {
		t.Helper()
		ctx := context.Background()
		for range 2 {
			if _, err := c.Read(ctx); err != nil {
				t.Fatal(err)
			}
		}
		one, _ := jsonrpc.MakeID(float64(1))
		b, _ := jsonrpc.MakeID("b")
		other, _ := jsonrpc.MakeID(float64(99))
		for _, resp := range []*jsonrpc.Response{
			{ID: b, Result: json.RawMessage(`{}`)},
			{ID: other, Result: json.RawMessage(`{"x":1}`)},
			{ID: one, Error: &jsonrpc.Error{Code: -1, Message: "no"}},
		} {
			if err := c.Write(ctx, resp); err != nil {
				t.Fatal(err)
			}
		}
		return buf.String()
	}
	var sdkOut, ourOut bytes.Buffer
	sdk, err := (&mcp.IOTransport{Reader: io.NopCloser(strings.NewReader(stream)), Writer: &bufCloser{&sdkOut}}).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	ours := newLineConn(io.NopCloser(strings.NewReader(stream)), &bufCloser{&ourOut}, nil)
	defer ours.Close()
	want, got := written(sdk, &sdkOut), written(ours, &ourOut)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("written (-sdk +lineConn):\n%s", diff)
	}
	if !strings.Contains(got, "[") {
		t.Errorf("no array written:\n%s", got)
	}
}
