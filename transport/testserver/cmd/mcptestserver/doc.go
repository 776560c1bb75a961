// Command mcptestserver is the test server of package testserver as a real
// process: an MCP server over stdio (the default) or HTTP (-http), with
// switches that make it misbehave. See package testserver for its tools.
//
// Usage:
//
//	mcptestserver [-refuse-ping] [-hang-initialize] [-hang-close] [-garbage] [-grandchild] [-tools-ttl d]
//	mcptestserver -http 127.0.0.1:0 [-stateless | -sse] [-refuse-ping] [-hang-initialize] [-hang-close]
//
// Either form also takes -journal FILE, -control FILE, -burst-tool and
// -protocols V1,V2; stdio also -garbage-on-usr1 (see package testserver's
// Options).
//
// Switches of this command only (stdio), for the transport's tests:
//
//	-ignore-eof           keep running after stdin closes (SIGTERM still ends it)
//	-on-usr2 WHAT         on SIGUSR2, close stdout (close-stdout) or write a
//	                      line longer than the SDK's limit (oversize)
//	-crash-loudly         the crash tool writes a line to stderr before it exits
//	-echo-args WHERE      quote the arguments in the error of every initialize
//	                      (error), or on stderr and exit 1 (stderr)
//	-token VALUE          ignored (a secret for the redaction tests)
//	-sampling-tool        register the sample tool (see testserver.AddSamplingTool)
//	-raw                  serve a hand-written JSON-RPC server instead of the SDK's,
//	                      whose tool ask {method} sends the client a request of
//	                      that method whatever it advertised (see raw.go)
//
// With -http it prints its endpoint URL on a line of stdout once listening.
// Its crash tool exits at once with status 3.
package main
