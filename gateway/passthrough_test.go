package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// lookalikes are JSON-RPC errors a backend may answer with whose messages read like
// the go-sdk's own refusal of a front request (its params that do not decode, a
// method it does not handle), which the fronts re-code: a backend's are its own,
// for the front's client, and pass through as they are.
var lookalikes = []*jsonrpc.Error{
	{Code: -32000, Message: "handling 'payment': card declined", Data: json.RawMessage(`{"retry":false}`)},
	{Code: -32602, Message: `handling 'prompts/get': invalid params: unmarshaling "{}" into a *mcp.GetPromptParams: the backend's own`},
	{Code: -32600, Message: `handling 'prompts/get': invalid request: missing required "params"`},
	{Code: 0, Message: `handling 'initialize': unmarshaling "x" into a *mcp.initializeParamsV2: the backend's own`},
	{Code: -32603, Message: `method not found: "` + strings.Repeat("m", 100) + `"`, Data: json.RawMessage(`{"hint":"upgrade"}`)},
	{Code: -32000, Message: `JSON RPC not handled: "prompts/get" unsupported`},
	{Code: -32020, Message: `failed to extract name from parameters for method "prompts/get"`},
	// (A go-sdk backend's -32601 is sent as `method not found: "M"` by its own
	// jsonrpc2, whatever its handler said: see TestGateway_BackendMethodNotFound
	// for a backend's own -32601.)
}

// lookalikeBackend is a server of a config whose prompt "refuse" fails with
// lookalikes[kind], kind its argument.
func lookalikeBackend(name string) mcpfsm.ServerConfig {
	s := mcp.NewServer(&mcp.Implementation{Name: "lookalike", Version: "1"}, nil)
	s.AddPrompt(&mcp.Prompt{Name: "refuse", Arguments: []*mcp.PromptArgument{{Name: "kind"}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			i, err := strconv.Atoi(req.Params.Arguments["kind"])
			if err != nil || i < 0 || i >= len(lookalikes) {
				return nil, err
			}
			e := *lookalikes[i]
			return nil, &e
		})
	return mcpfsm.ServerConfig{Name: name, Policies: quick(), Transport: transport.Config{
		Name: name, InMemory: &transport.InMemory{Server: s},
	}}
}

// TestGateway_BackendErrorsPassedThrough: a backend's own JSON-RPC error whose message
// reads like the go-sdk's refusal of a request's params or method ("handling 'M':
// ...", "method not found: ...", "JSON RPC not handled: ...") reaches the front's
// client as the backend answered it (code, message, data), on the stdio front and
// over streamable HTTP on 2025-11-25 and 2026-07-28: the fronts re-code only the
// go-sdk's refusal of the front's request. They re-coded a backend's "handling
// 'payment': card declined" (-32000, with data) as -32602 "invalid params of
// \"payment\"", and a backend's "method not found" lost its data.
func TestGateway_BackendErrorsPassedThrough(t *testing.T) {
	g := start(t, config(lookalikeBackend("b")), gateway.Options{})
	request := func(id int, meta string) badParams {
		if meta != "" {
			meta = "," + meta
		}
		return badParams{id: strconv.Itoa(id), method: "prompts/get",
			params: `{"name":"b__refuse","arguments":{"kind":"` + strconv.Itoa(id) + `"}` + meta + `}`}
	}
	check := func(t *testing.T, what string, i int, answer string) {
		t.Helper()
		var msg errorAnswer
		want := lookalikes[i]
		if err := json.Unmarshal([]byte(answer), &msg); err != nil || msg.Error == nil || string(msg.ID) != strconv.Itoa(i) ||
			msg.Error.Code != want.Code || msg.Error.Message != want.Message || !bytes.Equal(msg.Error.Data, want.Data) {
			t.Errorf("%s: the backend's error %d %q (data %s) reached the front's client as %.400s", what, want.Code, want.Message, want.Data, answer)
		}
	}

	t.Run("stdio", func(t *testing.T) {
		send, answer := stdioLines(t, g)
		send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"h","version":"1"}}}`)
		answer(`"init"`)
		send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		for i := range lookalikes {
			send(request(i, "").line())
			check(t, "stdio", i, answer(strconv.Itoa(i)))
		}
	})

	t.Run("http", func(t *testing.T) {
		url := serveHTTP(t, g, gateway.HTTPOptions{})
		stateful := rawSession(t, url, "2025-11-25")
		for i := range lookalikes {
			c := request(i, "")
			check(t, "2025-11-25", i, postAnswer(t, url, c, stateful))
			c = request(i, meta2026)
			check(t, "2026-07-28", i, postAnswer(t, url, c, map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "prompts/get", "Mcp-Name": "b__refuse"}))
		}
	})
}

// TestGateway_BatchRefusals: on a 2025-03-26 session, whose POSTs may carry batches,
// each request of a batch whose params do not decode is answered -32602 naming its
// field under its own ID (a string with escapes too), and the batch's other answers
// are as they were.
func TestGateway_BatchRefusals(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	h := rawSession(t, url, "2025-03-26")
	bad := []badParams{
		{"1", "tools/call", `{"name":7,"arguments":{"pad":"` + big() + `"}}`, -32602, "name"},
		{`"3\"x\u00e9"`, "prompts/get", `{"name":"a__greet","arguments":{"k":5}}`, -32602, "arguments.k"},
		{"4", "resources/read", `{"uri":["` + big() + `"]}`, -32602, "uri"},
	}
	good := `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`
	resp := postWith(t, url, "["+bad[0].line()+","+good+","+bad[1].line()+","+bad[2].line()+"]", h)
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	answers := map[string]string{}
	for line := range strings.Lines(string(data)) {
		if m, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "data: "); ok {
			var msg struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal([]byte(m), &msg) == nil {
				answers[string(msg.ID)] = m
			}
		}
	}
	if len(answers) != 4 {
		t.Fatalf("%s: %d answers to a batch of 4: %.600s", resp.Status, len(answers), data)
	}
	for _, c := range bad {
		// The ID is answered as the go-sdk writes it.
		var id any
		_ = json.Unmarshal([]byte(c.id), &id)
		written, _ := json.Marshal(id)
		c.id = string(written)
		c.check(t, answers[c.id])
	}
	if a := answers["2"]; !strings.HasPrefix(a, `{"jsonrpc":"2.0","id":2,"result":{`) || !strings.Contains(a, `"tools":[{`) {
		t.Errorf("tools/list in the batch was answered %.300s", a)
	}
}

// TestGateway_BatchDuplicateIDs: a 2025-03-26 batch that holds one request ID twice
// (MCP forbids it) gets HTTP 400 with the stdio front's answer to that line
// (-32600, id null: a batch refused whole), and the session goes on. The go-sdk's
// handler answered one of the two and dropped the other unanswered.
func TestGateway_BatchDuplicateIDs(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	h := rawSession(t, url, "2025-03-26")
	send, answer := stdioLines(t, g)
	send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"h","version":"1"}}}`)
	answer(`"init"`)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for _, body := range []string{
		`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":1,"method":"tools/list"}]`,
		`[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":"\u0061","method":"ping"}]`,
	} {
		send(body)
		want := answer("null")
		resp := postWith(t, url, body, h)
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got, stdio errorAnswer
		if err := json.Unmarshal([]byte(want), &stdio); err != nil || stdio.Error == nil || stdio.Error.Code != -32600 {
			t.Fatalf("%s: the stdio front answered %.300s", body, want)
		}
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(data, &got) != nil || got.Error == nil ||
			string(got.ID) != "null" || got.Error.Code != stdio.Error.Code || got.Error.Message != stdio.Error.Message {
			t.Errorf("%s: %s %.300s, want 400 and the stdio front's answer %.300s", body, resp.Status, data, want)
		}
	}
	// One ID in two POSTs' batches, one after the other: each is answered.
	for range 2 {
		resp := postWith(t, url, `[{"jsonrpc":"2.0","id":7,"method":"ping"}]`, h)
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(data), `{"jsonrpc":"2.0","id":7,"result":{}}`) {
			t.Errorf("a batch of one ping after them: %s %.300s", resp.Status, data)
		}
	}
}

// TestGateway_BackendMethodNotFound: a backend's own error of code -32601 (a
// backend without completion/complete or resources/subscribe, saying so, with
// data) reaches the front's client as the backend sent it (code, message, data),
// on the stdio front and over streamable HTTP on 2025-11-25, 2026-07-28 and a
// 2025-03-26 batch of two. The go-sdk's jsonrpc2 answered every handler's error of
// code -32601 with its own `method not found: "M"`, the backend's message and
// data lost.
func TestGateway_BackendMethodNotFound(t *testing.T) {
	g := start(t, config(rawBackend(t, "raw")), gateway.Options{})
	cs := front(t, g, nil, "")
	waitTools(t, cs, has("raw__sample"))
	// The prompt and the resource are listed apart from the tools: waited for too.
	for deadline := time.Now().Add(waitFor); ; time.Sleep(10 * time.Millisecond) {
		prompts, err1 := cs.ListPrompts(callCtx(t), nil)
		resources, err2 := cs.ListResources(callCtx(t), nil)
		if err1 == nil && err2 == nil && len(prompts.Prompts) == 1 && len(resources.Resources) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the raw backend's prompt and resource were never listed: %v %v", err1, err2)
		}
	}
	requests := []struct{ method, params string }{
		{"completion/complete", `{"ref":{"type":"ref/prompt","name":"raw__p"},"argument":{"name":"a","value":"x"}`},
		{"resources/subscribe", `{"uri":"` + rawResource + `"`},
	}
	request := func(id int, r int, meta string) badParams {
		if meta != "" {
			meta = "," + meta
		}
		return badParams{id: strconv.Itoa(id), method: requests[r].method, params: requests[r].params + meta + "}"}
	}
	check := func(t *testing.T, what string, r int, answer string) {
		t.Helper()
		var msg errorAnswer
		want := "raw does not do " + requests[r].method
		if err := json.Unmarshal([]byte(answer), &msg); err != nil || msg.Error == nil ||
			msg.Error.Code != -32601 || msg.Error.Message != want || string(msg.Error.Data) != rawNotFoundData {
			t.Errorf("%s: %s: the backend's -32601 %q (data %s) reached the front's client as %.400s", what, requests[r].method, want, rawNotFoundData, answer)
		}
	}

	t.Run("stdio", func(t *testing.T) {
		send, answer := stdioLines(t, g)
		send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"h","version":"1"}}}`)
		answer(`"init"`)
		send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		for r := range requests {
			send(request(r, r, "").line())
			check(t, "stdio", r, answer(strconv.Itoa(r)))
		}
	})

	t.Run("http", func(t *testing.T) {
		url := serveHTTP(t, g, gateway.HTTPOptions{})
		stateful := rawSession(t, url, "2025-11-25")
		for r := range requests {
			check(t, "2025-11-25", r, postAnswer(t, url, request(r, r, ""), stateful))
			h := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": requests[r].method}
			if r == 0 { // resources/subscribe is not of 2026-07-28
				check(t, "2026-07-28", r, postAnswer(t, url, request(r, r, meta2026), h))
			}
		}
		// A batch: each answer gets its own error's data back.
		old := rawSession(t, url, "2025-03-26")
		resp := postWith(t, url, "["+request(1, 0, "").line()+","+request(2, 1, "").line()+"]", old)
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answers := map[string]string{}
		for l := range strings.Lines(string(data)) {
			if m, ok := strings.CutPrefix(strings.TrimSuffix(l, "\n"), "data: "); ok {
				var msg errorAnswer
				if json.Unmarshal([]byte(m), &msg) == nil {
					answers[string(msg.ID)] = m
				}
			}
		}
		check(t, "2025-03-26 batch", 0, answers["1"])
		check(t, "2025-03-26 batch", 1, answers["2"])
	})
}

// TestGateway_PassedErrorsByRequest: the requests of a 2025-03-26 batch whose
// backend errors (-32601) have one message and data of their own each get their
// own data back. The data the go-sdk's encoding drops was found again by the
// error's message alone: two answers written in another order than their errors
// came back took each other's data.
func TestGateway_PassedErrorsByRequest(t *testing.T) {
	g := start(t, config(rawBackend(t, "raw")), gateway.Options{})
	cs := front(t, g, nil, "")
	waitTools(t, cs, has("raw__fail_echo"))
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	h := rawSession(t, url, "2025-03-26")
	const n = 16
	for round := range 20 {
		var batch []string
		for i := range n {
			id := round*n + i
			batch = append(batch, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"raw__fail_echo","arguments":{"n":%d}}}`, id, id))
		}
		resp := postWith(t, url, "["+strings.Join(batch, ",")+"]", h)
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answered := 0
		for l := range strings.Lines(string(data)) {
			m, ok := strings.CutPrefix(strings.TrimSuffix(l, "\n"), "data: ")
			if !ok {
				continue
			}
			var msg errorAnswer
			if json.Unmarshal([]byte(m), &msg) != nil || msg.Error == nil {
				t.Fatalf("an answer of the batch: %.300s", m)
			}
			answered++
			if want := `{"n":` + string(msg.ID) + `}`; msg.Error.Code != -32601 || msg.Error.Message != "raw refuses fail_echo" || string(msg.Error.Data) != want {
				t.Errorf("round %d: the answer to %s is %d %q with data %s, want the backend's -32601 with data %s", round, msg.ID, msg.Error.Code, msg.Error.Message, msg.Error.Data, want)
			}
		}
		if answered != n {
			t.Fatalf("round %d: %d answers to a batch of %d: %.600s", round, answered, n, data)
		}
	}
}
