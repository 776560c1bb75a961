// Package gateway is one MCP server in front of every server of a servers config
// (mcpfsm serve). Each backend is held by its own connection of an mcpfsm.Manager,
// kept alive and healed by its lifecycle; the front server, an mcp.Server of the
// go-sdk, is served over stdio, streamable HTTP (Handler), or both.
//
// # Names
//
// A backend's tools, prompts, resources and resource templates are shown under names
// that say where they come from: the server's prefix (its name, or its config's
// prefix:), the separator ("__" by default, so that names satisfy the function-name
// rule of common LLM APIs) and the backend's name: files__read_file. prefix: ""
// passes names unchanged; include and exclude patterns filter them; rename shows a
// tool or prompt under a name of its own. Resource URIs are never changed: a read or
// a subscription goes to the server that lists the URI, or else to the first (in
// config order) whose template matches it. A name two servers would show goes to the
// one written first (the config loader refuses names that could collide by their
// prefixes alone).
//
// # What the front sees of an unhealthy backend
//
// The gateway keeps its own copy of each backend's last lists: a backend that is
// down, reconnecting or behind an open breaker keeps its tools shown. A call to it
// fails at once (or after Options.ReadyWait) with a tool error result naming the
// server, its state, its last failure and its next move; other backends are not
// affected. A call in flight when its backend dies follows the connection's rules
// (mcpfsm.Conn.CallTool): sent again on the next session only when the server cannot
// have run it or the tool is read-only or idempotent; otherwise a tool error result
// says the server may have run it. A backend's own protocol error (an unknown tool,
// bad arguments) is passed on unchanged.
//
// # What goes through
//
// Tool calls, prompts, resource reads, completion (by a prompt's shown name or a
// template's URI), subscriptions (the first front subscription to a URI subscribes
// the backend, whose connection keeps it across reconnects; the last one gone
// unsubscribes it; a front session holds at most 1,024, the front sessions together
// 4,096 resources), logging (the backends are set to the most verbose level any front
// session asked for; a 2026-07-28 front request's level, in its _meta, goes on in the
// request's _meta to a 2026-07-28 backend, and an older backend, which takes a level
// only by logging/setLevel, is set to it before the request's call is sent when it has
// none as verbose, and kept at it until no request asked it for five minutes, see
// levels.go; a message goes to the front session whose call is in flight (on
// 2026-07-28, to its call asking the most verbose level), or, when that is not
// known, to every front session and every 2026-07-28 front request in flight to the
// backend, each filtering by its own level), progress (a backend's progress for a
// call reaches the front under the front's token, before the call's result, which
// the go-sdk alone would let overtake them: see transport/order.go),
// cancellation (a front request cancelled, its client gone, its session deleted, or
// the gateway closed, cancels the backend's call, see inflight.go; a request the
// gateway's Close cancelled is answered with a JSON-RPC error saying so; a request its
// client cancelled gets no answer, see answerless.go; a backend that cancels its
// sampling request cancels the front's),
// list changes (the front sessions are told when a backend's lists change, reconnects
// and reloads included), and the backends' sampling and elicitation requests (a
// URL-mode elicitation's end, notifications/elicitation/complete, goes to the front
// session that was asked it), which
// go to the front client that made the call they serve (see backend.go for how that
// client is found on each protocol version), as requests of the gateway's own on a
// front session before 2026-07-28 and as input requests (SEP-2322: the backend's call
// waits, parked, for the client's retry; see mrtr.go) on 2026-07-28, and are refused
// (-32021, missing client capability) when it lacks the capability. Roots: a backend's
// roots/list during a call gets the roots of the front client that made the call, on
// every protocol version (a 2026-07-28 backend's input requests go through the
// gateway's middleware, see mcpfsm.Manager.AddReceivingMiddleware): refused as
// sampling is when that client does not serve roots, failed when it fails to give
// them; outside a call (or on 2025-11-25 when several front sessions have calls in
// flight to the backend, and so the call is not known), the backends are given the
// union of the front sessions' roots.
//
// Initialize says what is behind the gateway: its title lists the servers, and its
// instructions give each server's prefix, implementation and own instructions.
//
// # Scale out
//
// Replicas behind a load balancer that hashes the Mcp-Session-Id header keep each
// session on the replica that created it when each replica mints IDs that hash to
// itself (NginxHashSessionID). A session whose replica is gone gets 404 from the one
// that takes its requests: the client must initialize a new session (the MCP rule for
// a 404 on a session), and gets one from a live replica. An event stream silent for
// HTTPOptions.Heartbeat (25 s) gets an SSE comment, so that a proxy's idle timeout
// does not cut it.
package gateway
