// Package mcpfsm keeps long-lived MCP client connections healthy, and speaks the whole
// protocol through them.
//
// # The connection
//
// A Conn is one connection to one MCP server (over stdio, streamable HTTP, SSE or in
// memory: see package transport). It owns its sessions: an explicit state machine,
// declared in a YAML lifecycle (transitions.yaml by default, DefaultSpec) and executed
// by github.com/qmuntal/stateless, opens, probes and closes them, and nothing else
// does. The machine's owner, one goroutine at a time (an idle connection holds none),
// runs every effect; timers, the end of a session, failed calls and Close only post
// events to it.
//
// # States are data
//
// The lifecycle declares its states and, for each, what a call does in it when it finds
// no session: serve (a session is up), wait (until one is, or the call's context
// ends), or fail (at once, with ErrUnavailable naming the state and wrapping the last
// failure). The default lifecycle has idle, connecting, ready, probing, replacing,
// retiring, tearing-down, backing-off, breaker-open, half-open, parked (a failure that
// retrying cannot fix, such as a missing command), unauthorized and closed; a spec of
// your own may add others (docs/lifecycles has two). A few rules are the engine's and
// hold whatever a spec says; the head of transitions.yaml lists them (failures that
// count, stale events, order of effects, and Close, which always reaches a final state
// and which the validator proves terminates).
//
// # One call path
//
// Every request (CallTool, ListTools and Tools, prompts, resources and templates,
// ReadResource, Subscribe, Complete, SetLoggingLevel, Ping) goes through one path: it
// takes the current session (an atomic load), sends the request from the caller's
// goroutine, and, only if it fails, classifies the error (package effects) and reports
// a failure that counts to the machine, which replaces the session. A request that
// failed because its session broke is sent once more on the next session when the
// server cannot have run it, or when running it twice is harmless: reads, subscribe,
// set-level, and tools annotated readOnlyHint or idempotentHint. Any other tool call
// fails with ErrMayHaveRun: it is never run twice. WithReport tells a caller whether
// its request was retried; WithProgress hands it a call's progress, through a retry.
//
// # What survives a reconnect
//
// What a user establishes on a session is part of the connection: the log level
// (SetLoggingLevel) and resource subscriptions (Subscribe) are re-established on every
// new session, after a failure, an expired session or a planned replacement, before
// calls move to it; roots (Options.Roots, SetRoots) are the client's and the new
// session's server asks for them. After a reconnect every subscribed resource is
// reported updated once (an update may have been missed meanwhile), and the tool,
// prompt and resource lists are listed again and handed to their handlers if they
// changed. A subscription the new session's server refuses (the resource is gone) is
// dropped, and reported updated once so that a read finds out; a level it refuses is
// logged and kept for the next session. A restore that fails otherwise is the new
// session's failure: it does not serve. Unsubscribe with no session up forgets the
// subscription at once.
//
// # What the server sends
//
// Handlers answer the server's requests (sampling, elicitation) and see its
// notifications (log messages, progress, updated resources, changed lists). The client
// advertises only what it has a handler for (and roots only when given).
//
// # Many servers
//
// A Manager keeps a Conn to each server of a Config (LoadConfig reads one from YAML),
// routes requests by server, shares SDK clients among connections with the same
// handlers, and adopts a changed config without a restart (Reload).
package mcpfsm
