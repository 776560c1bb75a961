// Package simulate runs a connection's lifecycle in virtual time against a scripted
// server, so that what a policy edit does can be seen before it ships: days of
// simulated time take a second, and the same seed gives the same timeline.
//
// A Scenario is a server's timeline (up, down, frozen, restarted) and a stream of
// calls. Run plays it against a spec and its policies with machine.Sim and returns the
// transitions and a Summary. The package's World also drives a real machine.Machine
// (its tests do, under testing/synctest, to prove the simulation takes the same path).
package simulate
