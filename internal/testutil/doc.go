// Package testutil holds what the project's tests share across packages: a buffer for
// logs written from many goroutines; this process's child processes and open files,
// read from /proc (Linux), for the leak checks that follow fault tests; and the npm
// installs of the interop tests' pinned servers and clients; and a streamable HTTP
// MCP server written by hand, which answers what a test says (RawHTTPServer); and a
// clock of a thread's CPU time (WorkClock), for tests that bound what their code
// costs on a machine under load.
package testutil
