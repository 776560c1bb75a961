// Package testserver is an MCP server for tests and demos, with switches that
// make it misbehave in the ways real servers do.
//
// Use it in-process ([New], [NewHandler], [StartHTTP]) or as a real
// subprocess: [Build] compiles cmd/mcptestserver once per test process, and
// [Args] turns Options into its flags.
//
// Tools:
//
//   - echo {text}: returns text. Read-only.
//   - counter {}: returns 1, 2, 3... counting per session. Not idempotent.
//     (On a stateless HTTP server every request is a new session: always 1.)
//   - slow {ms}: sleeps ms milliseconds (or until cancelled), then returns
//     "slept". Idempotent.
//   - crash {}: the binary exits at once with status 3, without answering. In
//     process it calls Options.Crash if set (the HTTP harness stops its
//     server, as if the process died); otherwise it closes the calling
//     session from the server side without answering the call, so the client
//     sees its call fail and its connection end while the server lives on.
//   - change_tools {}: adds (or removes) a tool named "extra", so that the
//     server sends notifications/tools/list_changed.
//   - grandchild {}: returns Options.Grandchild, the pid of the process the
//     binary started for SpawnGrandchild (0 if none).
//   - stats {}: returns a JSON object counting, per method, the requests and
//     notifications this server has received (all sessions), including this
//     call. It lets a test see what reached the server on any transport.
//   - journal {id, ms} (only with Options.Journal): appends id to the journal
//     file, holds ms milliseconds, returns id. Not idempotent. A call its
//     client cancels first (notifications/cancelled, or on 2026-07-28 over
//     streamable HTTP its request's end, where the server propagates it)
//     appends "cancelled id" as it stops; one whose connection ends does not
//     (over stdio the go-sdk's server may take a cancel that its stdin's end
//     follows at once for that end: it cancels a request on a goroutine of its
//     own, and the end cancels every request at once).
//   - tools_changed_burst {n} (only with Options.BurstTool): changes the tool
//     list and sends notifications/tools/list_changed n times; returns how
//     many were sent.
//   - touch {uri}: bumps the version of the resource uri and sends
//     notifications/resources/updated for it to the sessions subscribed to
//     it; returns how many sessions are subscribed ("0", "1", ...).
//   - change_resources {}: adds (or removes) the resource test://static/extra,
//     so that the server sends notifications/resources/list_changed; returns
//     "added test://static/extra" or "removed test://static/extra".
//   - change_prompts {}: adds (or removes) the prompt extra, so that the
//     server sends notifications/prompts/list_changed; returns "added extra"
//     or "removed extra".
//   - log {level, text}: sends text as notifications/message at level
//     (debug ... emergency; another level is a tool error) through the
//     session's logger, which drops it below the client's level as the SDK
//     does: before 2026-07-28 the level of the session's last
//     logging/setLevel (nothing is sent before one), from 2026-07-28 the
//     level in the request's _meta (io.modelcontextprotocol/logLevel).
//     Returns "sent" or "filtered". Read-only.
//   - slow_progress {ms, steps}: takes steps steps (at least 1) of ms
//     milliseconds each, sending notifications/progress with the call's
//     progress token after each (progress i, total steps; none without a
//     token), then returns "progressed <steps>". Read-only.
//   - sample {prompt}: asks the client for sampling/createMessage with one
//     user message, prompt; returns the model's text. Read-only.
//   - elicit {message}: asks the client for elicitation/create (a form with
//     one string property, answer); returns the action, then a space and the
//     content as JSON if there is any: `accept {"answer":"yes"}`. Read-only.
//   - roots {}: asks the client for roots/list; returns the roots' URIs as
//     a JSON array. Read-only.
//   - sample_then_elicit {prompt, message} (both optional): sample, then
//     elicit, in one call; returns their two answers on two lines.
//     Read-only.
//   - elicit_complete {id}: sends notifications/elicitation/complete with
//     elicitationId id to the calling session; returns "sent". Read-only.
//   - state {}: returns, as JSON, what the calling session sent this server
//     (see SessionState and State): the levels of its logging/setLevel, its
//     subscriptions now and every subscribe it made, how many
//     notifications/roots/list_changed it sent, and its first methods. (On
//     stateless HTTP every request is a session of its own.) Read-only.
//
// The tools that ask the client send it a request during the call before
// protocol 2026-07-28; from 2026-07-28 on, where a server may not, they
// answer with input requests (SEP-2322) that the client fulfils and retries
// with (sample_then_elicit in two rounds).
//
// Resources: test://static/a and test://static/b, and the template
// test://items/{id} for any id, all text read as "<name> v<n>" ("a v0",
// "item 42 v0"), n being how many times touch touched the URI. Every one can
// be subscribed to (resources/subscribe, or subscriptions/listen from
// 2026-07-28); a subscribe to any other URI is refused with resource not
// found.
//
// Prompts: greet {name (required), greeting}, one user message
// "<greeting>, <name>!" (greeting Hello by default); without name it is an
// invalid-params error.
//
// Completion: the name argument of greet from CompletionNames, the id
// variable of test://items/{id} from CompletionIDs, those that start with the
// value typed; anything else is an invalid-params error.
package testserver
