// Command mcpfsm runs, inspects and tunes MCP connection lifecycles.
//
// Usage:
//
//	mcpfsm demo                                  a fault tour against an in-process server
//	mcpfsm run [--json] [--history] [--http-status ADDR] CONFIG
//	                                             connect to the servers of a config, print transitions
//	                                             (and serve a live status page, /status and /metrics)
//	mcpfsm status [--timeout D] [--json] CONFIG  connect, wait, print every server's status
//	mcpfsm auth login CONFIG SERVER              log in to a server (OAuth), store the token
//	mcpfsm auth status [--json] CONFIG           each server's credentials, never a token
//	mcpfsm call CONFIG SERVER TOOL [ARGUMENTS]   call one tool through a connection
//	mcpfsm ls CONFIG SERVER                      a server's info, tools, prompts, resources
//	mcpfsm read CONFIG SERVER URI                read a resource
//	mcpfsm prompt CONFIG SERVER NAME [ARGUMENTS] get a prompt
//	mcpfsm serve [--http ADDR] CONFIG            one MCP server in front of every server of a config
//	mcpfsm simulate [--spec FILE | --config FILE --server NAME] SCENARIO
//	                                             a lifecycle in virtual time
//	mcpfsm graph [--format dot|mermaid] [SPEC]   render a lifecycle (default: the built-in one)
//	mcpfsm validate FILE                         check a lifecycle spec
//	mcpfsm example-server [--http ADDR] [--crash-after D]
//	                                             the example MCP server
//
// Run "mcpfsm COMMAND --help" for a command's flags.
package main
