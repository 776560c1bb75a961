package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// This file is the -raw server: a hand-written JSON-RPC server over stdio, not
// the SDK's. The SDK's server checks the client's capabilities before it sends
// a request (it will not ask a client for elicitation that did not advertise
// it), so a client's own refusal of such a request can only be seen with a
// server that sends it regardless: this one.
//
// It answers server/discover with method-not-found (so the client falls back
// to initialize), initialize with protocol 2025-11-25 and the tools
// capability, ping, and tools/list with two tools. ask {method} sends the
// client a request of that method (elicitation/create, sampling/createMessage,
// roots/list or any other, with params that are valid for the three), waits up
// to 10 s for the client's answer, and returns that answer's JSON-RPC message
// as the tool's text. strange returns a content of type "bogus", which no
// client knows. Anything else is method-not-found.

// rawMessage is any JSON-RPC message.
type rawMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  any             `json:"result,omitempty"`
	Error   any             `json:"error,omitempty"`
}

// rawParams are the params ask sends with each method it knows.
var rawParams = map[string]any{
	"elicitation/create": map[string]any{
		"message":         "raw?",
		"requestedSchema": map[string]any{"type": "object", "properties": map[string]any{"answer": map[string]any{"type": "string"}}},
	},
	"sampling/createMessage": map[string]any{
		"messages":  []any{map[string]any{"role": "user", "content": map[string]any{"type": "text", "text": "raw"}}},
		"maxTokens": 10,
	},
	"roots/list": map[string]any{},
}

func serveRaw(in io.Reader, out io.Writer) error {
	var (
		wmu     sync.Mutex
		pmu     sync.Mutex
		pending = map[string]chan []byte{}
		next    int
	)
	write := func(m rawMessage) {
		m.JSONRPC = "2.0"
		b, _ := json.Marshal(m)
		wmu.Lock()
		defer wmu.Unlock()
		_, _ = out.Write(append(b, '\n'))
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<24)
	for sc.Scan() {
		line := append([]byte(nil), sc.Bytes()...)
		var m rawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			continue
		}
		switch {
		case m.Method == "" && len(m.ID) > 0: // an answer to a request of ours
			pmu.Lock()
			ch := pending[string(m.ID)]
			delete(pending, string(m.ID))
			pmu.Unlock()
			if ch != nil {
				ch <- line
			}
			continue
		case len(m.ID) == 0: // a notification
			continue
		}
		reply := rawMessage{ID: m.ID}
		switch m.Method {
		case "initialize":
			reply.Result = map[string]any{
				"protocolVersion": "2025-11-25",
				"capabilities":    map[string]any{"tools": map[string]any{}},
				"serverInfo":      map[string]any{"name": "raw", "version": "0"},
			}
		case "ping":
			reply.Result = map[string]any{}
		case "tools/list":
			reply.Result = map[string]any{"tools": []any{map[string]any{
				"name":        "ask",
				"inputSchema": map[string]any{"type": "object", "properties": map[string]any{"method": map[string]any{"type": "string"}}},
			}, map[string]any{
				"name":        "strange",
				"inputSchema": map[string]any{"type": "object"},
			}}}
		case "tools/call":
			var p struct {
				Name      string `json:"name"`
				Arguments struct {
					Method string `json:"method"`
				} `json:"arguments"`
			}
			_ = json.Unmarshal(m.Params, &p)
			if p.Name == "strange" {
				reply.Result = map[string]any{"content": []any{map[string]any{"type": "bogus", "text": "?"}}}
				break
			}
			pmu.Lock()
			next++
			id := fmt.Sprintf(`"raw-%d"`, next)
			ch := make(chan []byte, 1)
			pending[id] = ch
			pmu.Unlock()
			go func() { // the process ends with its stdin: nothing waits for this
				write(rawMessage{ID: json.RawMessage(id), Method: p.Arguments.Method, Params: mustJSON(rawParams[p.Arguments.Method])})
				text := "no answer within 10s"
				select {
				case got := <-ch:
					text = string(got)
				case <-time.After(10 * time.Second):
				}
				reply.Result = map[string]any{"content": []any{map[string]any{"type": "text", "text": text}}}
				write(reply)
			}()
			continue
		default:
			reply.Error = map[string]any{"code": -32601, "message": "method not found: " + m.Method}
		}
		write(reply)
	}
	return sc.Err()
}

func mustJSON(v any) json.RawMessage {
	if v == nil {
		v = map[string]any{}
	}
	b, _ := json.Marshal(v)
	return b
}
