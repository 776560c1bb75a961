package testutil

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// RawHTTPServer is a stateless streamable HTTP MCP server written by hand, which
// sends what the SDK's would not: each request's result is answer(its method) (nil:
// method not found), as JSON or, if sse, as an event stream; a notification gets 202.
func RawHTTPServer(sse bool, answer func(method string) any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if len(req.ID) == 0 {
			w.WriteHeader(http.StatusAccepted) // a notification
			return
		}
		msg := map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": answer(req.Method)}
		if msg["result"] == nil {
			msg = map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": -32601, "message": "no " + req.Method}}
		}
		data, _ := json.Marshal(msg)
		if sse {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: message\ndata: %s\n\n", data)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(data)
	})
}
