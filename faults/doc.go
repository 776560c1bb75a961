// Package faults is mcpfsm's fault matrix: one test per fault and transport,
// each against a real server (a real subprocess over stdio, real HTTP on
// loopback, in process or as a subprocess), with network faults made by
// toxiproxy embedded in the test process.
//
// The package has no code outside its tests. Run the matrix with
//
//	go test -race -count=1 ./faults
//
// and regenerate the table of docs/reliability.md from a run with
//
//	go test -race -count=1 ./faults -run TestMatrix -update
//
// Every row checks the same contract: each call returns a result or a typed
// error (*mcpfsm.CallError) by its context deadline; a non-idempotent call
// never runs twice (the server journals each run); after the row, its
// goroutines, file descriptors and child processes are gone. Each row also
// checks what its fault must do to the connection: how it is detected, that
// it is recovered from, or that it is rightly ignored.
package faults
