// Command client is mcpfsm's client for the client scenarios of the MCP conformance suite
// (@modelcontextprotocol/conformance). The suite runs it as `client URL`, with the
// scenario's name in MCP_CONFORMANCE_SCENARIO and, for the auth scenarios, the scenario's
// parameters in MCP_CONFORMANCE_CONTEXT (a JSON object). It exits 0 when the scenario ran
// to its end; the suite's checks decide whether it passed.
//
// Every request a scenario makes goes through the [session] interface, opened by an
// [opener]: the adapter over an mcpfsm.Conn in conn.go. No raw SDK session is used.
//
// Modelled on the go-sdk's conformance/everything-client: one function per scenario.
package main
