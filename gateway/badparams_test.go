package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
)

// A badParams is a request whose params the go-sdk's server cannot decode, and what
// answers it: code, and a message naming field (JSON-quoted within it).
type badParams struct {
	id, method, params string
	code               int64
	field              string
}

// big is a value too big to be quoted back (made when a test needs it: a
// package-level value of 256 KiB raised the heap the benchmarks of this package
// collect at, and so their figures): the go-sdk's answer quoted the whole
// params.
func big() string { return strings.Repeat("x", 256<<10) }

// meta2026 is the _meta a 2026-07-28 request carries.
const meta2026 = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
	`"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`

// badInitialize are initializes whose params do not decode (the go-sdk's answer had
// code 0: no JSON-RPC code), and one whose params are null.
func badInitialize() []badParams {
	return []badParams{
		{`"init-a"`, "initialize", `{"protocolVersion":5,"capabilities":{},"clientInfo":{"name":"h","version":"1"},"pad":"` + big() + `"}`, -32602, "protocolVersion"},
		{`"init-b"`, "initialize", `{"protocolVersion":"2025-11-25","capabilities":{"roots":["` + big() + `"]},"clientInfo":{"name":"h","version":"1"}}`, -32602, "capabilities.roots"},
		{`"init-c"`, "initialize", `null`, -32600, ""},
	}
}

// badRequests are requests of an initialized session (with _meta, on 2026-07-28).
func badRequests(meta string) []badParams {
	if meta != "" {
		meta = "," + meta
	}
	cases := []badParams{
		{"2", "tools/call", `{"name":7,"arguments":{"pad":"` + big() + `"}` + meta + `}`, -32602, "name"},
		{"3", "resources/read", `{"uri":{"pad":"` + big() + `"}` + meta + `}`, -32602, "uri"},
		{"4", "prompts/get", `{"name":"a__greet","arguments":{"` + big() + `":7}` + meta + `}`, -32602, "arguments." + strings.Repeat("x", 54)},
		{"5", "tools/list", `{"cursor":["` + big() + `"]` + meta + `}`, -32602, "cursor"},
		{`"s"`, "tools/call", `{"name":"a__echo","requestState":{"pad":"` + big() + `"}` + meta + `}`, -32602, "requestState"},
	}
	if meta == "" { // params that can carry no _meta
		cases = append(cases, badParams{"1", "tools/call", `[1,"` + big() + `"]`, -32602, ""},
			badParams{"7", "tools/call", `null`, -32600, ""})
	}
	return cases
}

func (c badParams) line() string {
	return `{"jsonrpc":"2.0","id":` + c.id + `,"method":"` + c.method + `","params":` + c.params + `}`
}

// An errorAnswer is a JSON-RPC error answer, as a front writes it.
type errorAnswer struct {
	ID    json.RawMessage `json:"id"`
	Error *struct {
		Code    int64           `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

// check asserts that answer is c's error under c's ID, naming its field, and short.
func (c badParams) check(t *testing.T, answer string) {
	t.Helper()
	var msg errorAnswer
	if err := json.Unmarshal([]byte(answer), &msg); err != nil || msg.Error == nil {
		t.Errorf("%s %s was answered %.300s, want an error", c.method, c.id, answer)
		return
	}
	if string(msg.ID) != c.id {
		t.Errorf("%s %s was answered under the ID %s", c.method, c.id, msg.ID)
	}
	if msg.Error.Code != c.code {
		t.Errorf("%s %s was answered with code %d (%.300s), want %d", c.method, c.id, msg.Error.Code, msg.Error.Message, c.code)
	}
	if c.field != "" && !strings.Contains(msg.Error.Message, `"`+c.field+`"`) {
		t.Errorf("%s %s was answered %q, which names no field %q", c.method, c.id, msg.Error.Message, c.field)
	}
	if len(answer) > 300 || strings.Contains(msg.Error.Message, strings.Repeat("x", 65)) {
		t.Errorf("%s %s was answered with %d bytes: %.300s", c.method, c.id, len(answer), answer)
	}
}

// TestGateway_InvalidParams: a request whose params do not decode is answered
// -32602 (invalid params) under its ID, over the stdio front and over streamable
// HTTP, on 2025-11-25 and 2026-07-28, with a message that names the field and
// quotes at most 64 bytes of the request: the go-sdk answered initialize's with
// code 0, and every answer quoted the whole params. A request whose params are null
// gets -32600 (initialize's too: it had code 0). The session goes on.
func TestGateway_InvalidParams(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})

	t.Run("stdio", func(t *testing.T) {
		for _, version := range []string{"2025-11-25", "2026-07-28"} {
			send, answer := stdioLines(t, g)
			cases, meta := badRequests(""), ""
			if version == "2025-11-25" {
				for _, c := range badInitialize() {
					send(c.line())
					c.check(t, answer(c.id))
				}
				send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"h","version":"1"}}}`)
				if a := answer(`"init"`); !strings.Contains(a, `"result"`) {
					t.Fatalf("initialize after the bad ones: %.300s", a)
				}
				send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			} else {
				meta = meta2026
				cases = badRequests(meta)
			}
			for _, c := range cases {
				send(c.line())
				c.check(t, answer(c.id))
			}
			// Params that decode, of names no server shows, quote at most 128
			// characters of them.
			for i, p := range []string{
				`"tools/call","params":{"name":"a__` + big() + `"`,
				`"prompts/get","params":{"name":"` + big() + `"`,
				`"completion/complete","params":{"ref":{"type":"ref/resource","uri":"` + big() + `"},"argument":{"name":"a","value":"b"}`,
				`"completion/complete","params":{"ref":{"type":"` + big() + `"},"argument":{"name":"a","value":"b"}`,
			} {
				if meta != "" {
					p += "," + meta
				}
				id := strconv.Itoa(90 + i)
				send(`{"jsonrpc":"2.0","id":` + id + `,"method":` + p + `}}`)
				if a := answer(id); !strings.Contains(a, `"code":-32602`) || len(a) > 1024 {
					t.Errorf("%s: %.40s was answered with %d bytes: %.300s", version, p, len(a), a)
				}
			}
			send(`{"jsonrpc":"2.0","id":99,"method":"tools/list","params":{` + strings.TrimPrefix(meta, ",") + `}}`)
			if a := answer("99"); !strings.Contains(a, `"result"`) {
				t.Errorf("%s: tools/list after the bad requests: %.300s", version, a)
			}
		}
	})

	t.Run("http", func(t *testing.T) {
		url := serveHTTP(t, g, gateway.HTTPOptions{})
		for _, c := range badInitialize() {
			c.check(t, postAnswer(t, url, c, nil))
		}
		stateful := rawSession(t, url, "2025-11-25")
		for _, c := range badRequests("") {
			c.check(t, postAnswer(t, url, c, stateful))
		}
		// On 2026-07-28 the go-sdk's handler refused the params of requests
		// with a name (Mcp-Name) as a name not matching its header (-32020).
		for _, c := range badRequests(meta2026) {
			h := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": c.method}
			switch c.method {
			case "tools/call":
				h["Mcp-Name"] = "a__echo"
			case "prompts/get":
				h["Mcp-Name"] = "a__greet"
			case "resources/read":
				h["Mcp-Name"] = "test://a"
			}
			c.check(t, postAnswer(t, url, c, h))
		}
	})
}

// stdioPipe opens a session of g's stdio front over pipes: send writes a line to it,
// lines are the lines it writes (without their end), in order, until it ends. The
// session ends with the test.
func stdioPipe(t *testing.T, g *gateway.Gateway) (send func(string), lines <-chan string) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Server().Run(ctx, transport.ServerStdio(inR, outW))
		outW.Close()
	}()
	out := make(chan string, 64)
	go func() {
		defer close(out)
		r := bufio.NewReaderSize(outR, 1<<20)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			out <- strings.TrimSuffix(line, "\n")
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		cancel()
		<-done
		outR.Close()
		for range out {
		}
	})
	send = func(line string) {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	return send, out
}

// stdioLines opens a session of g's stdio front over pipes (stdioPipe): send writes a
// line to it, answer returns the next line it writes under id, skipping others.
func stdioLines(t *testing.T, g *gateway.Gateway) (send func(string), answer func(id string) string) {
	t.Helper()
	send, lines := stdioPipe(t, g)
	answer = func(id string) string {
		t.Helper()
		timeout := time.After(waitFor)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("the stdio front ended, waiting for an answer under %s", id)
				}
				if strings.HasPrefix(line, `{"jsonrpc":"2.0","id":`+id+`,`) {
					return line
				}
			case <-timeout:
				t.Fatalf("no answer under %s", id)
			}
		}
	}
	return send, answer
}

// postAnswer posts c's request with headers and returns the message that answers
// it (a JSON body, or the data of an SSE event).
func postAnswer(t *testing.T, url string, c badParams, headers map[string]string) string {
	t.Helper()
	resp := postWith(t, url, c.line(), headers)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	body := string(data)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return body
	}
	for line := range strings.Lines(body) {
		if data, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "data: "); ok && strings.HasPrefix(data, `{"jsonrpc":"2.0","id":`+c.id+`,`) {
			return data
		}
	}
	return resp.Status + " " + body
}

// TestGateway_UnhandledRequests: a request of a method the gateway does not handle
// is answered -32601 (method not found) under its ID, and one missing its required
// params -32600, on the stdio front and over streamable HTTP on 2025-11-25 (HTTP 200,
// as a JSON-RPC error is) and 2026-07-28 (its errors with their status), quoting at
// most 128 bytes of the method; the session goes on. Over HTTP on 2025-11-25 the
// go-sdk's handler refused both with a 400 of plain text, before any session saw
// them, at which the go-sdk's client ends its whole session.
func TestGateway_UnhandledRequests(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	unknown := `{"jsonrpc":"2.0","id":21,"method":"foo/` + big() + `","params":{}}`
	noParams := `{"jsonrpc":"2.0","id":"np","method":"tools/call"}`
	check := func(t *testing.T, what, answer, id string, code int64) {
		t.Helper()
		c := badParams{id: id, method: what, code: code}
		c.check(t, answer)
	}

	t.Run("stdio", func(t *testing.T) {
		send, answer := stdioLines(t, g)
		send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"h","version":"1"}}}`)
		answer(`"init"`)
		send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		send(unknown)
		check(t, "an unknown method", answer("21"), "21", -32601)
		send(noParams)
		check(t, "tools/call without params", answer(`"np"`), `"np"`, -32600)
	})

	t.Run("http", func(t *testing.T) {
		url := serveHTTP(t, g, gateway.HTTPOptions{})
		stateful := rawSession(t, url, "2025-11-25")
		for _, tc := range []struct {
			version string
			headers map[string]string
			status  int
		}{
			{"2025-11-25", stateful, http.StatusOK},
			{"2026-07-28", map[string]string{"Mcp-Protocol-Version": "2026-07-28"}, 0},
		} {
			for _, r := range []struct {
				what, line, method, id string
				code                   int64
			}{
				{"an unknown method", unknown, "foo/" + big(), "21", -32601},
				{"tools/call without params", noParams, "tools/call", `"np"`, -32600},
			} {
				line := r.line
				h := maps.Clone(tc.headers)
				h["Mcp-Method"] = r.method
				if tc.version == "2026-07-28" {
					line = strings.Replace(line, `"params":{}`, `"params":{`+meta2026+`}`, 1)
					h["Mcp-Method"] = r.method[:min(len(r.method), 64)]
				}
				resp := postWith(t, url, line, h)
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if tc.status != 0 && resp.StatusCode != tc.status {
					t.Errorf("%s: %s was answered with %s, want %d", tc.version, r.what, resp.Status, tc.status)
				}
				check(t, tc.version+" "+r.what, strings.TrimSpace(string(data)), r.id, r.code)
			}
		}
		list := postWith(t, url, `{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{}}`, stateful)
		data, _ := io.ReadAll(list.Body)
		list.Body.Close()
		if !strings.Contains(string(data), `"result"`) {
			t.Errorf("tools/list on the session after them: %s %.300s", list.Status, data)
		}
	})
}

// TestGateway_RefusedNotification: a notification the gateway's HTTP front refuses
// (a method it does not handle, one of 256 KiB; a request's method without an ID)
// gets HTTP 400 with a JSON-RPC error that has no ID, as MCP's streamable HTTP
// transport asks of a notification the server cannot accept (2025-11-25 and
// 2026-07-28), and the session serves on. The go-sdk's handler answered a 400 of
// plain text.
func TestGateway_RefusedNotification(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	stateful := rawSession(t, url, "2025-11-25")
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		for _, n := range []struct {
			method string
			code   int64
		}{
			{"notifications/bogus", -32601},
			{"notifications/" + big(), -32601},
			{"tools/call", -32600},
		} {
			h := stateful
			if version == "2026-07-28" {
				h = map[string]string{"Mcp-Protocol-Version": version, "Mcp-Method": n.method[:min(len(n.method), 64)]}
			}
			resp := postWith(t, url, `{"jsonrpc":"2.0","method":"`+n.method+`","params":{}}`, h)
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var msg map[string]json.RawMessage
			var e struct {
				Code    int64  `json:"code"`
				Message string `json:"message"`
			}
			what := fmt.Sprintf("%s: a notification of %.40q", version, n.method)
			switch {
			case resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/json":
				t.Errorf("%s: %s %q, want 400 with a JSON-RPC error: %.300s", what, resp.Status, resp.Header.Get("Content-Type"), data)
			case json.Unmarshal(data, &msg) != nil || json.Unmarshal(msg["error"], &e) != nil || string(msg["jsonrpc"]) != `"2.0"`:
				t.Errorf("%s: %.300s is no JSON-RPC error", what, data)
			case msg["id"] != nil || e.Code != n.code || len(data) > 300:
				t.Errorf("%s: %.300s (%d bytes), want code %d, no id, under 300 bytes", what, data, len(data), n.code)
			}
		}
	}
	list := postWith(t, url, `{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{}}`, stateful)
	data, _ := io.ReadAll(list.Body)
	list.Body.Close()
	if !strings.Contains(string(data), `"result"`) {
		t.Errorf("tools/list on the session after them: %s %.300s", list.Status, data)
	}
}

// TestGateway_BadBodies: a POST whose body the stdio front refuses as a line (not
// JSON; an ID neither string nor number, or null; a numeric ID that is not an
// integer below 2^53 in magnitude) gets HTTP 400 with the answer the stdio front
// gives that line (-32700 or -32600, under the ID as written, or null), on
// 2025-11-25 and 2026-07-28. The go-sdk's handler refused the first ones with a 400
// of plain text ("malformed payload: ..."), and took the last: 1.5 was answered
// under the ID 1, 9007199254740993 under 9007199254740992.
func TestGateway_BadBodies(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	stateful := rawSession(t, url, "2025-11-25")
	send, answer := stdioLines(t, g)
	send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"h","version":"1"}}}`)
	answer(`"init"`)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for _, c := range []struct{ id, answered, name string }{
		{`1.5`, `1.5`, ``}, {`9007199254740993`, `9007199254740993`, ``}, {`-1e300`, `-1e300`, ``},
		{`1.0000000000000001`, `1.0000000000000001`, ``}, {`1.0`, `1.0`, ``}, {`1e0`, `1e0`, ``}, {`-0`, `-0`, ``},
		{`10000000000000000001`, `10000000000000000001`, ``}, {`"\ud800"`, `"\ud800"`, ``}, {`"x\udfff"`, `"x\udfff"`, ``},
		{`true`, `null`, ``}, {`{}`, `null`, ``}, {`null`, `null`, ``}, {`1,`, `null`, ``}, // the last, no JSON
		// The member's name written with escapes, "id" all the same to the go-sdk.
		{`1.5`, `1.5`, `"\u0069d"`}, {`"\ud800"`, `"\ud800"`, `"i\u0064"`},
	} {
		id, name := c.id, c.name
		if name == "" {
			name = `"id"`
		}
		body := `{"jsonrpc":"2.0",` + name + `:` + id + `,"method":"tools/list","params":{` + meta2026 + `}}`
		send(body)
		want := answer(c.answered)
		var stdio errorAnswer
		if err := json.Unmarshal([]byte(want), &stdio); err != nil || stdio.Error == nil {
			t.Fatalf("id %s: the stdio front answered %.300s", id, want)
		}
		for _, version := range []string{"2025-11-25", "2026-07-28"} {
			h := stateful
			if version == "2026-07-28" {
				h = map[string]string{"Mcp-Protocol-Version": version, "Mcp-Method": "tools/list"}
			}
			resp := postWith(t, url, body, h)
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var got errorAnswer
			if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(data, &got) != nil || got.Error == nil ||
				string(got.ID) != string(stdio.ID) || got.Error.Code != stdio.Error.Code || got.Error.Message != stdio.Error.Message {
				t.Errorf("%s: a body with the id %s: %s %.300s, want 400 and the stdio front's answer %.300s", version, id, resp.Status, data, want)
			}
		}
	}
	// A refusal of the request's headers stands, whatever its body: it is not
	// told its body is no JSON.
	h := maps.Clone(stateful)
	h["Accept"] = "application/json"
	resp := postWith(t, url, `{"jsonrpc":"2.0","id":1,`, h)
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(string(data), "Accept must contain") {
		t.Errorf("a body no JSON without text/event-stream accepted: %s %.300s, want the go-sdk's 400 saying what Accept must hold", resp.Status, data)
	}
	list := postWith(t, url, `{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{}}`, stateful)
	data, _ = io.ReadAll(list.Body)
	list.Body.Close()
	if !strings.Contains(string(data), `"result"`) {
		t.Errorf("tools/list on the session after them: %s %.300s", list.Status, data)
	}
}
