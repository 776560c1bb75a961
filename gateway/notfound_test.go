package gateway_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
)

// TestGateway_ResourceNotFoundControlChar: a resources/read or resources/subscribe
// of a URI no server shows, holding a control character, is answered "Resource not
// found" with the URI in its data, and the session goes on: the go-sdk's error
// quoted the URI as Go does ("a\x01b"), which is no JSON; the answer could not be
// written, and the session ended (the stdio front's, and with it mcpfsm serve; an
// HTTP session answered nothing from then). A URI over 1 KiB is not quoted back.
func TestGateway_ResourceNotFoundControlChar(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	cases := []badParams{
		{"1", "resources/read", `{"uri":"test://a\u0001b\u0007"}`, -32602, ""},
		{"2", "resources/subscribe", `{"uri":"test://a\u000bb"}`, -32602, ""},
		{"3", "resources/read", `{"uri":"test://` + strings.Repeat("y", 2000) + `"}`, -32602, ""},
	}
	check := func(t *testing.T, c badParams, answer string) {
		t.Helper()
		var msg errorAnswer
		var p, data struct {
			URI string `json:"uri"`
		}
		_ = json.Unmarshal([]byte(c.params), &p)
		want := p.URI
		if len(want) > 1024 {
			want = ""
		}
		err := json.Unmarshal([]byte(answer), &msg)
		if err == nil && msg.Error != nil && len(msg.Error.Data) > 0 {
			err = json.Unmarshal(msg.Error.Data, &data)
		}
		if err != nil || msg.Error == nil || string(msg.ID) != c.id ||
			msg.Error.Code != c.code || msg.Error.Message != "Resource not found" || data.URI != want {
			t.Errorf("%s %s was answered %.300q", c.method, c.id, answer)
		}
	}
	t.Run("stdio", func(t *testing.T) {
		send, answer := stdioLines(t, g)
		send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"h","version":"1"}}}`)
		answer(`"init"`)
		send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		for _, c := range cases {
			send(c.line())
			check(t, c, answer(c.id))
		}
		send(`{"jsonrpc":"2.0","id":9,"method":"ping"}`)
		answer("9")
	})
	t.Run("http", func(t *testing.T) {
		url := serveHTTP(t, g, gateway.HTTPOptions{})
		h := rawSession(t, url, "2025-11-25")
		for _, c := range cases {
			check(t, c, postAnswer(t, url, c, h))
		}
		ping := badParams{id: "9", method: "ping", params: "{}"}
		if a := postAnswer(t, url, ping, h); !strings.Contains(a, `"result"`) {
			t.Errorf("a ping after: %.300s", a)
		}
	})
}
