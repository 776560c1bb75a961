package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestServerStdioSkipsBadLines: an MCP server on ServerStdio answers each line
// that is not a message with a JSON-RPC error and goes on serving the same
// session; the go-sdk's own stdio transport ends the session at the first such
// line. A blank line is skipped without an answer; a line longer than the limit
// is answered once, without the session holding it whole.
func TestServerStdioSkipsBadLines(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "front", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, in struct{ Text string }) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inW, outR, done := runStdioFront(ctx, srv)
	answers := bufio.NewReader(outR)

	send := lineSender(t, inW)
	type answer struct {
		ID    any
		Error *struct {
			Code    int64
			Message string
		}
		Result json.RawMessage
	}
	next := func() answer {
		t.Helper()
		line, err := answers.ReadBytes('\n')
		if err != nil {
			t.Fatalf("reading an answer: %v", err)
		}
		var a answer
		if err := json.Unmarshal(line, &a); err != nil {
			t.Fatalf("the answer %q: %v", line, err)
		}
		return a
	}
	errCode := func(a answer) int64 {
		if a.Error == nil {
			return 0
		}
		return a.Error.Code
	}

	for _, tc := range []struct {
		name, line string
		wantID     any
		wantCode   int64
	}{
		{"not JSON", "this is not JSON", nil, -32700},
		{"a truncated object", `{"jsonrpc":"2.0","id":3,"method":`, nil, -32700},
		{"a wrong version", `{"jsonrpc":"1.0","id":7,"method":"ping"}`, float64(7), -32600},
		{"neither request nor response", `{"jsonrpc":"2.0"}`, nil, -32600},
		{"an ID of the wrong type", `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, nil, -32600},
		{"an empty batch", `[]`, nil, -32600},
		{"JSON that is not an object", `42`, nil, -32600},
		{"too long", `{"jsonrpc":"2.0","id":9,"method":"ping","params":{"pad":"` + strings.Repeat("x", mcp.DefaultMaxLineLength) + `"}}`, float64(9), -32600},
		// The TypeScript SDK writes the ID last: answered under it all the same
		// (it waited for its answer until its timeout, and the go-sdk's client
		// ended its session at the answer of id null).
		{"too long, its ID last", `{"method":"tools/call","params":{"name":"echo","arguments":{"id":1,"text":"` + strings.Repeat("x", mcp.DefaultMaxLineLength) + `"}},"jsonrpc":"2.0","id":"late"}`, "late", -32600},
		{"too long, an ID that is an object", `{"jsonrpc":"2.0","method":"ping","params":{"pad":"` + strings.Repeat("x", mcp.DefaultMaxLineLength) + `"},"id":{"id":3}}`, nil, -32600},
	} {
		send(tc.line)
		a := next()
		if got := []any{a.ID, errCode(a)}; !cmp.Equal(got, []any{tc.wantID, tc.wantCode}) {
			t.Errorf("%s: answered id and code %v, want %v", tc.name, got, []any{tc.wantID, tc.wantCode})
		}
		// The host's line, not a server's message (as the error once said).
		if strings.HasPrefix(tc.name, "too long") && (a.Error == nil || !strings.Contains(a.Error.Message, "the line exceeds")) {
			t.Errorf("too long: answered %+v, want the line's length named", a.Error)
		}
	}

	// The session is the same one, and works: initialize, then a call.
	send("")
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if a := next(); a.ID != float64(1) || a.Error != nil || len(a.Result) == 0 {
		t.Fatalf("initialize answered %+v", a)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send("garbage between calls")
	if a := next(); errCode(a) != -32700 {
		t.Errorf("garbage between calls answered %+v", a)
	}
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"Text":"still here"}}}`)
	a := next()
	if a.ID != float64(2) || !strings.Contains(string(a.Result), "still here") {
		t.Errorf("the call after bad lines answered %+v (%s)", a, a.Result)
	}

	// The end of stdin ends the session.
	inW.Close()
	select {
	case err := <-done:
		if err != nil && err != io.EOF {
			t.Logf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return at the end of stdin")
	}
	outR.Close()
}

// TestReadLine: lines are read whole up to the limit, a longer line is read to
// its end and reported with only its ID kept (none for one that has none), and
// the last line needs no newline.
func TestReadLine(t *testing.T) {
	long := strings.Repeat("y", mcp.DefaultMaxLineLength+10)
	longWithID := `{"params":{"pad":"` + long + `"},"id":12}`
	br := bufio.NewReaderSize(strings.NewReader("one\n"+long+"\ntwo\n"+longWithID+"\nlast"), 64<<10)
	type got struct {
		Line    string
		TooLong bool
		Err     error
	}
	var all []got
	for {
		line, tooLong, err := readLine(br)
		all = append(all, got{string(line), tooLong, err})
		if err != nil {
			break
		}
	}
	want := []got{{"one", false, nil}, {"", true, nil}, {"two", false, nil}, {`{"id":12}`, true, nil}, {"last", false, io.EOF}}
	if diff := cmp.Diff(want, all, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
		t.Errorf("readLine (-want +got):\n%s", diff)
	}
}

// TestIDScanner: the top-level "id" of an object read in pieces, wherever it is
// written, whatever the pieces (the whole text at once, or a byte at a time), and
// not an "id" inside a string, a nested object or an array.
func TestIDScanner(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{`{"jsonrpc":"2.0","id":7,"method":"ping"}`, `7`},
		{`{"method":"x","params":{"id":1,"a":[{"id":2}]},"jsonrpc":"2.0","id":"abc"}`, `"abc"`},
		{` { "id" : -1.5e3 , "x":1}`, `-1.5e3`},
		{`{"id":"a \"quoted\" \\ id"}`, `"a \"quoted\" \\ id"`},
		{`{"pad":"\"id\":5","text":"\\","id":6}`, `6`},
		{`{"ID":8}`, ``}, // no "id": the front matches names exactly (see unmarshal)
		{`{"id":1,"ID":2}`, `1`},
		{`{"\u0069d":4}`, `4`}, // its name, once unescaped, is "id"
		{`{"id":1,"\u0069\u0064":2}`, `2`},
		{`{"i\u0064":"x","\"id":3}`, `"x"`},
		{`{"idx":1,"xid":2}`, ``},
		{`{"id":1,"id":2}`, `2`}, // the last, as encoding/json takes it
		{`{"id":{"id":1}}`, ``},
		{`{"id":[1]}`, ``},
		{`[{"id":1}]`, ``}, // a batch: no one ID
		{`{"params":{"pad":"xxxx`, ``},
		{`{"id":"` + strings.Repeat("z", maxIDBytes) + `"}`, ``}, // too long to keep
		{"\xef\xbb\xbf{\"id\":3}", `3`},
	} {
		var whole, bytewise idScanner
		whole.feed([]byte(tc.text))
		for i := range len(tc.text) {
			bytewise.feed([]byte(tc.text[i : i+1]))
		}
		if string(whole.id) != tc.want || string(bytewise.id) != tc.want {
			t.Errorf("%s: found %q (a byte at a time %q), want %q", tc.text, whole.id, bytewise.id, tc.want)
		}
	}
}

// TestServerStdioUnansweredBounded: a front client that writes requests and reads
// no answers is read no more once maxUnanswered of its requests wait for their
// answers to be written: each held a goroutine, blocked writing, and a stdio client
// writing 100,000 of them (11 MB) grew the gateway past 1.2 GB. Its answers read,
// its requests are read again.
func TestServerStdioUnansweredBounded(t *testing.T) {
	defer func(n int) { maxUnanswered = n }(maxUnanswered)
	maxUnanswered = 8
	srv := mcp.NewServer(&mcp.Implementation{Name: "front", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inW, outR, done := runStdioFront(ctx, srv)
	answers := bufio.NewReader(outR)
	if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n"+`{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := answers.ReadBytes('\n'); err != nil {
		t.Fatal(err)
	}
	// Pings, their answers unread: the writes stop being read after about
	// maxUnanswered of them (the pipe holds none).
	written := make(chan int, 1)
	go func() {
		n := 0
		for ; n < 100; n++ {
			if _, err := fmt.Fprintf(inW, `{"jsonrpc":"2.0","id":%d,"method":"ping"}`+"\n", n+1); err != nil {
				break
			}
		}
		written <- n
	}()
	select {
	case n := <-written:
		t.Fatalf("all %d requests were read with none of their answers read", n)
	case <-time.After(time.Second):
	}
	// Their answers read, the rest are read and answered.
	for n := range 100 {
		if _, err := answers.ReadBytes('\n'); err != nil {
			t.Fatalf("answer %d: %v", n+1, err)
		}
	}
	if n := <-written; n != 100 {
		t.Errorf("%d requests written, want 100", n)
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestServerStdioCancelWithID: a notifications/cancelled sent with an ID (a request,
// which MCP has no such of) is refused under its ID with -32600, as the go-sdk's
// server refuses a notification's method with an ID, and cancels nothing. The
// go-sdk acts on a cancel by its method before it looks at the ID: the request it
// named was cancelled all the same, and answered with its handler's error (code 0,
// "context canceled"), and one without params was answered {"code":0,"message":"EOF"}.
func TestServerStdioCancelWithID(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "front", Version: "1"}, nil)
	release := make(chan struct{})
	mcp.AddTool(srv, &mcp.Tool{Name: "block"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-release:
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "released"}}}, nil, nil
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inW, outR, done := runStdioFront(ctx, srv)
	send, read := lineSender(t, inW), timedLineReader(t, outR)
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	read("initialize")
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{}}}`)
	for _, id := range []string{"2", `"three"`} {
		send(`{"jsonrpc":"2.0","id":` + id + `,"method":"notifications/cancelled","params":{"requestId":1}}`)
		if a := strings.TrimSpace(read("a cancel with an ID")); !strings.HasPrefix(a, `{"jsonrpc":"2.0","id":`+id+`,"error":{"code":-32600,`) {
			t.Errorf("a cancel with the ID %s was answered %s, want -32600 under its ID", id, a)
		}
	}
	send(`{"jsonrpc":"2.0","id":4,"method":"notifications/cancelled"}`)
	if a := strings.TrimSpace(read("a cancel with an ID and no params")); !strings.HasPrefix(a, `{"jsonrpc":"2.0","id":4,"error":{"code":-32600,`) {
		t.Errorf("a cancel with an ID and no params was answered %s, want -32600 under its ID", a)
	}
	close(release) // the call, not cancelled, is answered
	if a := strings.TrimSpace(read("the call")); !strings.HasPrefix(a, `{"jsonrpc":"2.0","id":1,"result":`) || !strings.Contains(a, "released") {
		t.Errorf("the call named by the cancels with an ID was answered %s, want its result", a)
	}
	inW.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return at the end of stdin")
	}
}

// TestServerStdioCancelledNotAnswered: a request its client cancels
// (notifications/cancelled) is not answered, as MCP asks of the receiver; the
// go-sdk's server answered it with its handler's error ("context canceled", code
// 0), which the client took for the answer to a request it never sent (the
// TypeScript SDK v2's client reports "a response for an unknown message ID"). A
// cancel that comes after the answer changes nothing, and an ID used again after
// its cancel (which MCP forbids) is answered.
func TestServerStdioCancelledNotAnswered(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "front", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "block"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inW, outR, done := runStdioFront(ctx, srv)
	send, read := lineSender(t, inW), lineReader(t, outR)
	next := func() string {
		t.Helper()
		line := read()
		var a struct{ ID any }
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("the answer %q: %v", line, err)
		}
		return fmt.Sprint(a.ID)
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if id := next(); id != "0" {
		t.Fatalf("initialize: answer %s", id)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	// Two calls, a number ID and a string one, cancelled; then a ping, whose answer
	// is the next one written.
	send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{}}}`)
	send(`{"jsonrpc":"2.0","id":"two","method":"tools/call","params":{"name":"block","arguments":{}}}`)
	time.Sleep(100 * time.Millisecond) // the calls are under way
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"gave up"}}`)
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"two"}}`)
	time.Sleep(200 * time.Millisecond) // the handlers return, the SDK answers them
	send(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	if id := next(); id != "3" {
		t.Errorf("after two cancelled calls, the answer to %s came, want the ping's (3)", id)
	}

	// A cancel after the answer; then the same ID again (MCP forbids it, but the
	// new request is answered).
	send(`{"jsonrpc":"2.0","id":4,"method":"ping"}`)
	if id := next(); id != "4" {
		t.Fatalf("ping 4: answer %s", id)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}`)
	send(`{"jsonrpc":"2.0","id":4,"method":"ping"}`)
	if id := next(); id != "4" {
		t.Errorf("a ping reusing a cancelled ID: answer %s, want 4", id)
	}
	send(`{"jsonrpc":"2.0","id":5,"method":"ping"}`)
	if id := next(); id != "5" {
		t.Errorf("ping 5: answer %s", id)
	}

	inW.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return at the end of stdin")
	}
	outR.Close()
}

// runStdioFront runs srv on ServerStdio over pipes until ctx ends or its stdin is
// closed: a test writes its client's lines to in and reads the answers from out,
// whose reads fail once the session has ended; done gets Run's error.
func runStdioFront(ctx context.Context, srv *mcp.Server) (in *io.PipeWriter, out *io.PipeReader, done <-chan error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ended := make(chan error, 1)
	go func() {
		err := srv.Run(ctx, ServerStdio(inR, outW))
		outW.CloseWithError(fmt.Errorf("the session ended: %v", err)) // what a read of an answer then fails with
		ended <- err
	}()
	return inW, outR, ended
}

// lineReader returns a function that reads the next line from r (its newline
// kept), failing the test if it cannot.
func lineReader(t *testing.T, r io.Reader) func() string {
	answers := bufio.NewReader(r)
	return func() string {
		t.Helper()
		line, err := answers.ReadString('\n')
		if err != nil {
			t.Fatalf("reading an answer: %v", err)
		}
		return line
	}
}

// timedLineReader returns a function that reads the next line from r (its newline
// kept), failing the test if none comes within 5 s, and "" once r has ended. The
// lines are read on a goroutine of their own, which ends with r.
func timedLineReader(t *testing.T, r io.Reader) func(what string) string {
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		answers := bufio.NewReader(r)
		for {
			line, err := answers.ReadString('\n')
			if err != nil {
				return
			}
			lines <- line
		}
	}()
	return func(what string) string {
		t.Helper()
		select {
		case line := <-lines:
			return line
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no answer in 5s", what)
			return ""
		}
	}
}

// lineSender returns a function that writes a line to w, failing the test if it cannot.
func lineSender(t *testing.T, w io.Writer) func(line string) {
	return func(line string) {
		t.Helper()
		if _, err := io.WriteString(w, line+"\n"); err != nil {
			t.Fatalf("writing %.40q: %v", line, err)
		}
	}
}

// TestServerStdioRequestIDs: a front answers every request under the ID its client
// wrote, or refuses it. A request reusing the ID of one not yet answered (MCP
// forbids it) was dropped unanswered by the go-sdk, and kept its token of
// unanswered for good: maxUnanswered of them and the front read nothing more, the
// host's later requests never answered. A numeric ID the go-sdk's ID cannot hold
// exactly (1.5, or an integer past 2^53) was answered under another (1, or the
// nearest float64), which a client could take for the answer to another request.
// A null ID (MCP forbids it) made a notification of the request, never answered.
func TestServerStdioRequestIDs(t *testing.T) {
	defer func(n int) { maxUnanswered = n }(maxUnanswered)
	maxUnanswered = 8
	srv := mcp.NewServer(&mcp.Implementation{Name: "front", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "block"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inW, outR, done := runStdioFront(ctx, srv)
	read := timedLineReader(t, outR)
	next := func(what string) string {
		t.Helper()
		return strings.TrimSpace(read(what))
	}
	send := lineSender(t, inW)
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	next("initialize")
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	send(`{"jsonrpc":"2.0","id":50,"method":"tools/call","params":{"name":"block","arguments":{}}}`)
	for i := range 2 * maxUnanswered {
		send(`{"jsonrpc":"2.0","id":50,"method":"ping"}`)
		if a := next(fmt.Sprintf("a ping reusing the ID of the call in flight (%d)", i+1)); !strings.HasPrefix(a, `{"jsonrpc":"2.0","id":50,"error":{"code":-32600,`) || !strings.Contains(a, "in use") {
			t.Fatalf("a ping reusing the ID of the call in flight was answered %s, want -32600 under its ID", a)
		}
	}
	send(`[{"jsonrpc":"2.0","id":51,"method":"ping"},{"jsonrpc":"2.0","id":50,"method":"ping"}]`)
	if a := next("a batch reusing the ID"); !strings.Contains(a, "-32600") || !strings.Contains(a, "in use") {
		t.Errorf("a batch reusing the ID of the call in flight was answered %s", a)
	}
	send(`[{"jsonrpc":"2.0","id":52,"method":"ping"},{"jsonrpc":"2.0","id":52,"method":"ping"}]`)
	if a := next("a batch with one ID twice"); !strings.Contains(a, "-32600") {
		t.Errorf("a batch with one ID twice was answered %s", a)
	}
	for _, tc := range []struct{ id, want string }{
		{`1.5`, `{"jsonrpc":"2.0","id":1.5,"error":`},
		{`9007199254740993`, `{"jsonrpc":"2.0","id":9007199254740993,"error":`},
		{`-1e300`, `{"jsonrpc":"2.0","id":-1e300,"error":`},
		{`null`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,`}, // unanswered: a notification to the go-sdk
		{`9007199254740991`, `{"jsonrpc":"2.0","id":9007199254740991,"result":{}}`},
		{`-9007199254740991`, `{"jsonrpc":"2.0","id":-9007199254740991,"result":{}}`},
		{`0`, `{"jsonrpc":"2.0","id":0,"result":{}}`},
		{" \t7 ", `{"jsonrpc":"2.0","id":7,"result":{}}`}, // the ID's text is the number's, without the space around it
		// Numbers the go-sdk would answer under other text (1, 1000, 0, 1e19):
		// refused under the ID as written, which the client can match.
		{`1.0000000000000001`, `{"jsonrpc":"2.0","id":1.0000000000000001,"error":{"code":-32600,`},
		{`1.0`, `{"jsonrpc":"2.0","id":1.0,"error":{"code":-32600,`},
		{`1e0`, `{"jsonrpc":"2.0","id":1e0,"error":{"code":-32600,`},
		{`1e3`, `{"jsonrpc":"2.0","id":1e3,"error":{"code":-32600,`},
		{`-0`, `{"jsonrpc":"2.0","id":-0,"error":{"code":-32600,`},
		{`10000000000000000001`, `{"jsonrpc":"2.0","id":10000000000000000001,"error":{"code":-32600,`},
		// Strings the go-sdk would answer under another value (a lone
		// surrogate, or a byte that is no UTF-8, decoded as U+FFFD): refused
		// under the ID as written. An escape the answer writes otherwise, of
		// the same value, is taken.
		{`"\ud800"`, `{"jsonrpc":"2.0","id":"\ud800","error":{"code":-32600,`},
		{`"a\udc00"`, `{"jsonrpc":"2.0","id":"a\udc00","error":{"code":-32600,`},
		{`"\uD83Dx"`, `{"jsonrpc":"2.0","id":"\uD83Dx","error":{"code":-32600,`},
		{`"\ud83d\u0041"`, `{"jsonrpc":"2.0","id":"\ud83d\u0041","error":{"code":-32600,`},
		{"\"\xff\"", "{\"jsonrpc\":\"2.0\",\"id\":\"\xff\",\"error\":{\"code\":-32600,"},
		{`"\ud83d\ude00"`, `{"jsonrpc":"2.0","id":"😀","result":{}}`},
		{`"\\ud800"`, `{"jsonrpc":"2.0","id":"\\ud800","result":{}}`},
		{`"\u0061\ufffd"`, `{"jsonrpc":"2.0","id":"a�","result":{}}`},
		{`"s"`, `{"jsonrpc":"2.0","id":"s","result":{}}`},
		{`51`, `{"jsonrpc":"2.0","id":51,"result":{}}`}, // not taken by the refused batch
	} {
		send(`{"jsonrpc":"2.0","id":` + tc.id + `,"method":"ping"}`)
		if a := next("a ping of ID " + tc.id); !strings.HasPrefix(a, tc.want) {
			t.Errorf("a ping of ID %s was answered %s, want %s...", tc.id, a, tc.want)
		}
	}
	// A client that cancels the call and reuses its ID at once (before the
	// call's handler has returned) gets one answer under it, the refusal: the
	// cancelled call's is dropped.
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":50}}`)
	send(`{"jsonrpc":"2.0","id":50,"method":"ping"}`)
	if a := next("a ping of the cancelled call's ID"); !strings.HasPrefix(a, `{"jsonrpc":"2.0","id":50,"error":{"code":-32600,`) && a != `{"jsonrpc":"2.0","id":50,"result":{}}` {
		t.Errorf("a ping of the cancelled call's ID was answered %s, want its refusal (or, the call's handler done, its answer)", a)
	}
	// The call's ID is free again once it is answered.
	time.Sleep(100 * time.Millisecond) // its handler returns, its answer dropped
	send(`{"jsonrpc":"2.0","id":50,"method":"ping"}`)
	if a := next("a ping of the cancelled call's ID, once free"); a != `{"jsonrpc":"2.0","id":50,"result":{}}` {
		t.Errorf("a ping of the cancelled call's ID, once free, was answered %s", a)
	}
	send(`{"jsonrpc":"2.0","id":53,"method":"ping"}`)
	if a := next("a last ping"); a != `{"jsonrpc":"2.0","id":53,"result":{}}` {
		t.Errorf("a last ping was answered %s (a second answer under 50?)", a)
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	outR.Close()
}

// TestServerStdioAnswersAtTheEnd: a client that writes its requests and closes its
// stdin (a shell pipeline, a script; MCP's stdio shutdown begins so) gets their
// answers: the front reported the end at once, and the go-sdk cancelled every
// request in flight, unanswered. A request that does not end is given up after
// drainGrace, and the session ends.
func TestServerStdioAnswersAtTheEnd(t *testing.T) {
	defer func(d time.Duration) { drainGrace = d }(drainGrace)
	drainGrace = 2 * time.Second
	srv := mcp.NewServer(&mcp.Implementation{Name: "front", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "slow"}, func(ctx context.Context, _ *mcp.CallToolRequest, in struct{ MS int }) (*mcp.CallToolResult, any, error) {
		select {
		case <-time.After(time.Duration(in.MS) * time.Millisecond):
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint("slept ", in.MS)}}}, nil, nil
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	})
	for _, tc := range []struct {
		name string
		ms   int // how long the calls take
		want int // answers to the calls
	}{
		{"answered", 200, 3},
		{"given up", 600000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			inW, outR, done := runStdioFront(ctx, srv)
			var lines []string
			read := make(chan struct{})
			go func() {
				defer close(read)
				answers := bufio.NewScanner(outR)
				for answers.Scan() {
					lines = append(lines, answers.Text())
				}
			}()
			script := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n" +
				`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"
			for i := 1; i <= 3; i++ {
				script += fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"slow","arguments":{"MS":%d}}}`+"\n", i, tc.ms)
			}
			start := time.Now()
			if _, err := io.WriteString(inW, script); err != nil {
				t.Fatal(err)
			}
			inW.Close()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("Run did not return 20s after the end of stdin")
			}
			took := time.Since(start)
			<-read
			calls := 0
			for _, l := range lines {
				if strings.Contains(l, "slept") {
					calls++
				}
			}
			if calls != tc.want {
				t.Errorf("%d calls answered, want %d:\n%s", calls, tc.want, strings.Join(lines, "\n"))
			}
			if tc.want == 0 && took < drainGrace {
				t.Errorf("the session ended %v after stdin's end, want the grace (%v) given", took, drainGrace)
			}
		})
	}
}

// TestServerStdioEndNotHeldByAListen: at the end of stdin a 2026-07-28
// subscriptions/listen in flight (answered only when it ends, which its client can
// no longer ask for) is not waited for, as a call is (drainGrace): every such
// client's gateway would have lingered for the grace at each exit.
func TestServerStdioEndNotHeldByAListen(t *testing.T) {
	defer func(d time.Duration) { drainGrace = d }(drainGrace)
	drainGrace = 10 * time.Second
	for _, tc := range []struct {
		method string
		held   bool
	}{{"subscriptions/listen", false}, {"tools/call", true}} {
		t.Run(tc.method, func(t *testing.T) {
			inR, inW := io.Pipe()
			conn, err := ServerStdio(inR, io.Discard).Connect(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			go func() {
				// A 2026-07-28 request (its _meta names its protocol): no
				// initialize before it.
				fmt.Fprintf(inW, `{"jsonrpc":"2.0","id":1,"method":%q,"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`+"\n", tc.method)
				inW.Close()
			}()
			if msg, err := conn.Read(context.Background()); err != nil {
				t.Fatalf("reading the %s: %v, %v", tc.method, msg, err)
			}
			start := time.Now() // before the deadline is set: a read held to it takes 1s at least
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err = conn.Read(ctx)
			if held := time.Since(start) >= time.Second; held != tc.held {
				t.Errorf("the end of stdin with a %s in flight: read %v after %v (held: %v, want %v)", tc.method, err, time.Since(start).Round(time.Millisecond), held, tc.held)
			}
		})
	}
}

// TestServerStdioByteOrderMark: a UTF-8 byte order mark that starts the stream (as
// Windows PowerShell writes to a native command's stdin) is skipped: the first
// message, the client's initialize, was answered with a parse error. One further on
// is a line's error, as any stray byte is.
func TestServerStdioByteOrderMark(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "front", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inW, outR, done := runStdioFront(ctx, srv)
	send, next := lineSender(t, inW), lineReader(t, outR)
	send("\xef\xbb\xbf" + `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if a := next(); !strings.HasPrefix(a, `{"jsonrpc":"2.0","id":1,"result":`) {
		t.Errorf("initialize after a byte order mark answered %s", a)
	}
	send("\xef\xbb\xbf" + `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if a := next(); !strings.Contains(a, "-32700") {
		t.Errorf("a byte order mark past the stream's start: answered %s, want a parse error", a)
	}
	inW.Close()
	<-done
	outR.Close()
}

// TestServerStdioPendingBounded: the requests a front has read and not answered
// hold at most maxPending bytes of their lines; a request past it is refused at
// once (-32603, under its ID), not read later: a stdio client's 20 calls of 15 MiB
// at once took a gateway to 1.8 GB, and 1,024 could be in flight. A line alone
// is taken whatever its size; the bytes come back as requests are answered.
func TestServerStdioPendingBounded(t *testing.T) {
	defer func(n int, d time.Duration) { maxPending, drainGrace = n, d }(maxPending, drainGrace)
	maxPending, drainGrace = 1<<20, 100*time.Millisecond
	srv := mcp.NewServer(&mcp.Implementation{Name: "front", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "block"}, func(ctx context.Context, _ *mcp.CallToolRequest, in struct{ Pad string }) (*mcp.CallToolResult, any, error) {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inW, outR, done := runStdioFront(ctx, srv)
	read := timedLineReader(t, outR)
	send := lineSender(t, inW)
	next := func() string {
		t.Helper()
		return read("an answer")
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	next()
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	call := func(id int, pad int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"block","arguments":{"Pad":%q}}}`, id, strings.Repeat("x", pad))
	}
	send(call(1, 1500<<10)) // more than maxPending, alone: taken
	send(call(2, 100))
	if a := next(); !strings.HasPrefix(a, `{"jsonrpc":"2.0","id":2,"error":{"code":-32603`) || !strings.Contains(a, "wait for their answers") {
		t.Errorf("a call past maxPending answered %.200s, want -32603 under its ID", a)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	// Its answer is dropped, its bytes given back, once its handler has returned
	// (until then even a ping finds too few, and is refused at once); a call of
	// 600 KiB is taken then. (A call and a ping sent together raced the bytes'
	// return: the call refused, the ping taken.)
	for id, deadline := 1000, time.Now().Add(10*time.Second); ; id++ {
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, id))
		a := next()
		if a == fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{}}`, id)+"\n" {
			break
		}
		if !strings.HasPrefix(a, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"error":{"code":-32603`, id)) || time.Now().After(deadline) {
			t.Fatalf("after the big call's cancel, a ping answered %.200s, want -32603 until its bytes come back", a)
		}
		time.Sleep(20 * time.Millisecond)
	}
	send(call(100, 600<<10))
	send(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	if a := next(); a != `{"jsonrpc":"2.0","id":3,"result":{}}`+"\n" {
		t.Fatalf("once the big call's bytes came back, a call of 600 KiB and a ping: %.200s, want the ping answered (the call taken: it blocks)", a)
	}
	send(call(4, 300<<10))
	send(`{"jsonrpc":"2.0","id":5,"method":"ping"}`)
	if a := next(); a != `{"jsonrpc":"2.0","id":5,"result":{}}`+"\n" {
		t.Errorf("a ping after two calls within maxPending answered %.200s", a)
	}
	send(call(6, 200<<10))
	if a := next(); !strings.HasPrefix(a, `{"jsonrpc":"2.0","id":6,"error":{"code":-32603`) {
		t.Errorf("a call past maxPending answered %.200s, want -32603", a)
	}
	inW.Close()
	<-done
	outR.Close()
}

// TestServerStdioRefusedUnderTheirID: a line refused (a request reusing the ID of
// one not yet answered, or a line that is no valid message, here by its jsonrpc
// version) is answered under the ID it carries, as JSON-RPC asks of an ID that
// could be read, also when that ID is in use: with a null id, as it was, the
// refusal was an answer no client could match (the client's request under the
// ID never answered). The request in flight is answered later, under the same
// ID (see ServerStdio for why that is the lesser evil).
func TestServerStdioRefusedUnderTheirID(t *testing.T) {
	release := make(chan struct{})
	srv := mcp.NewServer(&mcp.Implementation{Name: "front", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "hold"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		select {
		case <-release:
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "released"}}}, nil, nil
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inW, outR, done := runStdioFront(ctx, srv)
	next := lineReader(t, outR)
	send := lineSender(t, inW)
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	next()
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":50,"method":"tools/call","params":{"name":"hold","arguments":{}}}`)
	send(`{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"hold","arguments":{}}}`)
	send(`{"jsonrpc":"2.0","id":51,"method":"ping"}`)
	if a := next(); a != `{"jsonrpc":"2.0","id":51,"result":{}}`+"\n" {
		t.Fatalf("a ping answered %s", a)
	}
	for _, tc := range []struct{ line, want string }{
		{`{"jsonrpc":"2.0","id":50,"method":"ping"}`, `50`},
		{`{"jsonrpc":"2.0","id":"s","method":"ping"}`, `"s"`},
		{`{"jsonrpc":"1.0","id":50,"method":"ping"}`, `50`},
		{`{"jsonrpc":"1.0","id":50.0,"method":"ping"}`, `50.0`},
		{`{"jsonrpc":"1.0","id":"s","method":"ping"}`, `"s"`},
		{`{"jsonrpc":"1.0","id":52,"method":"ping"}`, `52`}, // an ID not in use
		// The ID as the front read it: its names are matched exactly (an "ID"
		// is no ID), escaped or not.
		{`{"jsonrpc":"2.0","id":50,"method":"ping","ID":"s"}`, `50`},
		{`{"jsonrpc":"2.0","\u0069d":"s","method":"ping"}`, `"s"`},
	} {
		send(tc.line)
		if a := next(); !strings.HasPrefix(a, `{"jsonrpc":"2.0","id":`+tc.want+`,"error":{"code":-32600`) {
			t.Errorf("%s, while 50 and \"s\" are in flight, was answered %s, want -32600 under its ID", tc.line, a)
		}
	}
	close(release)
	answers := map[string]bool{}
	for range 2 {
		a := next()
		if !strings.Contains(a, "released") {
			t.Errorf("want the held calls' answers, got %s", a)
		}
		answers[a[:strings.Index(a, `,"result"`)]] = true
	}
	if !answers[`{"jsonrpc":"2.0","id":50`] || !answers[`{"jsonrpc":"2.0","id":"s"`] {
		t.Errorf("the held calls were answered under %v, want 50 and \"s\"", answers)
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	outR.Close()
}

// TestServerStdioBeforeInitialize: a request the session cannot take before
// initialize gets JSON-RPC's -32600 under its ID (a batch holding one, under a null
// id): the go-sdk's server answered it with an error of code 0, no JSON-RPC code.
// What the go-sdk takes before initialize is taken (a ping, logging/setLevel, a
// 2026-07-28 request, whose _meta says what initialize would), notifications are
// not answered, an initialize the go-sdk fails initializes nothing, and once
// initialize is answered every request goes through.
func TestServerStdioBeforeInitialize(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "front", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echoed"}}}, nil, nil
	})
	for _, tc := range []struct{ name, first string }{
		{"initialize", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`},
		{"2026-07-28", `{"jsonrpc":"2.0","id":0,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			inW, outR, done := runStdioFront(ctx, srv)
			next := lineReader(t, outR)
			send := lineSender(t, inW)
			for _, x := range []struct{ line, want string }{
				{`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"Invalid request: the session is not initialized`},
				{`{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"echo"}}`, `{"jsonrpc":"2.0","id":"c","error":{"code":-32600,`},
				{`[{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","id":3,"method":"tools/list"}]`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,`},
				{`{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}` + "\n" + `{"jsonrpc":"2.0","id":4,"method":"ping"}`, `{"jsonrpc":"2.0","id":4,"result":{}}`},
				{`{"jsonrpc":"2.0","id":5,"method":"logging/setLevel","params":{"level":"info"}}`, `{"jsonrpc":"2.0","id":5,"result":{}}`},
				// An initialize that fails initializes nothing.
				{`{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":5}}`, `{"jsonrpc":"2.0","id":7,"error":`},
				{`{"jsonrpc":"2.0","id":8,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":8,"error":{"code":-32600,"message":"Invalid request: the session is not initialized`},
				{tc.first, `{"jsonrpc":"2.0","id":0,"result":`},
				{`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"echo"}}`, `{"jsonrpc":"2.0","id":6,"result":{"content":[{"type":"text","text":"echoed"}]`},
			} {
				send(x.line)
				if a := next(); !strings.HasPrefix(a, x.want) {
					t.Errorf("%s was answered %s, want %s…", x.line, a, x.want)
				}
			}
			inW.Close()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			outR.Close()
		})
	}
}

// FuzzIDScanner: whatever it is fed, an idScanner does not panic, finds the same
// ID fed the text whole or a byte at a time, and for a JSON object finds the ID
// the front's decoding reads (its top-level member named "id" exactly, the last
// of them), if that is no object or array and fits in maxIDBytes.
func FuzzIDScanner(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":7,"method":"ping"}`,
		`{"method":"x","params":{"id":1},"id":"abc"}`,
		`{"id":1,"ID":2}`, `{"\u0069d":4}`, `{"pad":"\"id\":5","id":6}`,
		`{"id":-1.5e3}`, `{"id":"\ud83d\ude00"}`, `[{"id":1}]`, `{"id":{"id":1}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		var whole, bytewise idScanner
		whole.feed(text)
		for i := range text {
			bytewise.feed(text[i : i+1])
		}
		if !bytes.Equal(whole.id, bytewise.id) {
			t.Fatalf("%q: found %q whole, %q a byte at a time", text, whole.id, bytewise.id)
		}
		if i := firstNonSpace(text); i == len(text) || text[i] != '{' || !json.Valid(text) {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(text, &m); err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		var want []byte
		if v := m["id"]; v != nil && v[0] != '{' && v[0] != '[' && len(v) <= maxIDBytes {
			want = v
		}
		var seg struct {
			ID json.RawMessage `json:"id"`
		}
		if checkDepth(text) == nil && unmarshal(text, &seg) == nil && !bytes.Equal(seg.ID, m["id"]) {
			t.Fatalf("%q: the front reads the ID %q, a map %q", text, seg.ID, m["id"])
		}
		if !bytes.Equal(whole.id, want) {
			t.Fatalf("%q: found %q, want %q", text, whole.id, want)
		}
	})
}
