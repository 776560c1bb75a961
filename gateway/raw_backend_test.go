package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
)

// rawBackendEnv makes the test binary a raw stdio backend (rawBackendMain): a server
// that sends what no SDK's server would.
const rawBackendEnv = "MCPFSM_GATEWAY_RAW_BACKEND"

// rawBackend is a server of a config run as the test binary's raw backend, on
// protocol 2025-11-25. Its tools each send the client one request, as JSON, during
// the call, and answer with the client's response as text:
//   - elicit_null: elicitation/create with "params": null.
//   - elicit_titled_multi: elicitation/create of a form with one titled
//     multi-select, choice (items of type string with anyOf, as SEP-1330 allows).
//   - sample: sampling/createMessage, which it never cancels (it waits for its
//     answer whatever becomes of the call).
//   - sample_bad: sampling/createMessage whose maxTokens is a long string.
//
// and fail_echo fails at once with -32601, "raw refuses fail_echo", its data the
// call's arguments (one message, data of each call's own);
// and those that send a notification answer "sent" at once:
//   - spoof_update: notifications/resources/updated for testserver.ResourceA, a
//     resource of another server.
func rawBackend(t *testing.T, name string) mcpfsm.ServerConfig {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return mcpfsm.ServerConfig{Name: name, Policies: quick(), Transport: transport.Config{
		Name: name, ProtocolVersion: "2025-11-25",
		Stdio: &transport.Stdio{Command: exe, Env: map[string]string{rawBackendEnv: "1"}},
	}}
}

// rawFailing are the raw backend's tools that report progress (if asked to) and
// then fail with an error of their code.
var rawFailing = map[string]int{"fail_32601": -32601, "fail_32602": -32602, "fail_32603": -32603}

var rawRequests = map[string]string{
	"elicit_null": `{"jsonrpc":"2.0","id":"raw-1","method":"elicitation/create","params":null}`,
	"elicit_titled_multi": `{"jsonrpc":"2.0","id":"raw-1","method":"elicitation/create","params":{"mode":"form","message":"pick",` +
		`"requestedSchema":{"type":"object","properties":{"choice":{"type":"array","items":{"type":"string",` +
		`"anyOf":[{"const":"value1","title":"First"},{"const":"value2","title":"Second"}]}}}}}}`,
	"sample": `{"jsonrpc":"2.0","id":"raw-1","method":"sampling/createMessage","params":{"maxTokens":10,` +
		`"messages":[{"role":"user","content":{"type":"text","text":"hi"}}]}}`,
	"sample_bad": `{"jsonrpc":"2.0","id":"raw-1","method":"sampling/createMessage","params":{"maxTokens":"` + strings.Repeat("x", 64<<10) + `",` +
		`"messages":[{"role":"user","content":{"type":"text","text":"hi"}}]}}`,
	"spoof_update": `{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"` + testserver.ResourceA + `"}}`,
}

// rawResource is the raw backend's one resource; rawNotFoundData the data of its
// answer to a method it does not have (-32601, "raw does not do METHOD"): it has
// prompt "p" and resource rawResource but neither completion/complete nor
// resources/subscribe.
const (
	rawResource     = "raw://r"
	rawNotFoundData = `{"hint":"raw has no such method","methods":["tools/call"]}`
)

func rawBackendMain() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	out := bufio.NewWriter(os.Stdout)
	send := func(s string) {
		out.WriteString(s + "\n")
		out.Flush()
	}
	answer := func(id json.RawMessage, result any) {
		data, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
		send(string(data))
	}
	for in.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
				Meta      struct {
					ProgressToken json.RawMessage `json:"progressToken"`
				} `json:"_meta"`
			} `json:"params"`
		}
		if json.Unmarshal(in.Bytes(), &m) != nil || m.ID == nil || m.Method == "" {
			continue
		}
		switch m.Method {
		case "initialize":
			answer(m.ID, map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{"tools": map[string]any{},
				"prompts": map[string]any{}, "resources": map[string]any{}},
				"serverInfo": map[string]any{"name": "raw", "version": "1"}})
		case "prompts/list":
			answer(m.ID, map[string]any{"prompts": []any{map[string]any{"name": "p"}}})
		case "resources/templates/list":
			answer(m.ID, map[string]any{"resourceTemplates": []any{}})
		case "resources/list":
			answer(m.ID, map[string]any{"resources": []any{map[string]any{"name": "r", "uri": rawResource}}})
		case "tools/list":
			var tools []any
			for name := range rawFailing {
				tools = append(tools, map[string]any{"name": name, "inputSchema": map[string]any{"type": "object"}})
			}
			for name := range rawRequests {
				tools = append(tools, map[string]any{"name": name, "inputSchema": map[string]any{"type": "object"}})
			}
			tools = append(tools, map[string]any{"name": "fail_echo", "inputSchema": map[string]any{"type": "object"}})
			answer(m.ID, map[string]any{"tools": tools})
		case "tools/call":
			if m.Params.Name == "fail_echo" {
				send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"raw refuses fail_echo","data":%s}}`, m.ID, m.Params.Arguments))
				continue
			}
			if code, ok := rawFailing[m.Params.Name]; ok { // a progress report, then an error
				if m.Params.Meta.ProgressToken != nil {
					send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":%s,"progress":1}}`, m.Params.Meta.ProgressToken))
				}
				send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":"raw refuses %s","data":%s}}`, m.ID, code, m.Params.Name, rawNotFoundData))
				continue
			}
			send(rawRequests[m.Params.Name])
			if !strings.Contains(rawRequests[m.Params.Name], `"id"`) {
				answer(m.ID, map[string]any{"content": []any{map[string]any{"type": "text", "text": "sent"}}})
				continue
			}
			var reply string
			for in.Scan() { // the client's response to it; other messages are ignored
				var r struct {
					ID     json.RawMessage `json:"id"`
					Method string          `json:"method"`
				}
				if json.Unmarshal(in.Bytes(), &r) == nil && r.Method == "" && string(r.ID) == `"raw-1"` {
					reply = in.Text()
					break
				}
			}
			answer(m.ID, map[string]any{"content": []any{map[string]any{"type": "text", "text": reply}}})
		case "ping":
			answer(m.ID, map[string]any{})
		default:
			send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":%q,"data":%s}}`, m.ID, "raw does not do "+m.Method, rawNotFoundData))
		}
	}
}
