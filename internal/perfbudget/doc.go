// Command perfbudget measures mcpfsm's performance budget and prints it as one table:
// each figure beside its goal, the peers' figure where one exists, and the ratio of the
// measured figure to the goal. It is what docs/performance.md publishes.
//
// Usage, from the module's root:
//
//	go run ./internal/perfbudget [-rounds 9] [-pairs 60] [-benchtime 1s] [-faults 10] [-only REGEXP] [-v]
//
// It builds the test binaries of the root package, of package machine and of package
// transport once, then runs their benchmarks:
//
//   - BenchmarkCallOverhead and transport's BenchmarkRoundTripOverhead, five times
//     each: a call's own cost through a Conn and through the HTTP session, on stubs.
//   - The pairs (BenchmarkCallTool, BenchmarkCallToolParallel, BenchmarkCallToolHTTP:
//     sdk and machine; BenchmarkEvent: stateless and machine) run side by side, in
//     rounds: each round runs both halves of every pair, one right after the other,
//     in alternating order from round to round (sdk first, then machine first), each
//     in a fresh process. A pair's ratio is the median of its rounds' ratios, so that
//     the drift of a shared machine between rounds cancels out.
//   - The interleaved benchmarks (BenchmarkCallToolPaired with each pair,
//     BenchmarkReadResourcePaired, BenchmarkGetPromptPaired, BenchmarkCallToolPairedOTel)
//     alternate the two paths within one process, -pairs phase pairs each.
//   - BenchmarkIdleMachines and BenchmarkProbeSpread run once (-benchtime=1x): each
//     op is a whole experiment with 10,000 connections.
//   - BenchmarkDetection, BenchmarkRecovery and BenchmarkRecycle play -faults faults
//     each over streamable HTTP on loopback.
//
// Nothing here asserts: figures are reported, and a figure over its goal is marked.
package main
