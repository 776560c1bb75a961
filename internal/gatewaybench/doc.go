// Command gatewaybench measures mcpfsm serve side by side with two gateways of the
// npm registry, supergateway and mcp-proxy (pinned in package.json, installed here
// with npm ci), each fronting the same stdio backend (the go-sdk's conformance
// everything-server) over streamable HTTP, and the backend served over HTTP directly.
//
//	go run ./internal/gatewaybench [-rounds 3] [-cell 2s] [-clients 1,16,64] [-also NAME=BINARY,...]
//
// -also adds other builds of mcpfsm as targets of their own, run as mcpfsm is (to
// measure a change side by side with main: build it elsewhere, name its binary here).
//
// For each protocol mode (a go-sdk client asking for 2025-11-25, with a session, and
// the go-sdk client's default, 2026-07-28 where the server offers it), each number of
// clients and each round, every target is measured in turn (the order rotating from
// round to round, so that a shared machine's drift falls on all alike): the clients,
// each with a session of its own (2025-11-25) or sharing a client (2026-07-28), call
// a tool for one cell's time. It prints, per mode, clients and target, the medians over
// the rounds of p50 latency and throughput, the protocol negotiated, and the peak
// memory (RSS of the gateway and every process it started) over the whole run.
package main
