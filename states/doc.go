// Package states is the vocabulary Go code speaks to a connection's lifecycle: the
// triggers that effects and callers emit, and the causes a failure can have. The states
// themselves are data: a lifecycle spec (transitions.yaml) declares them, each with what
// calls do in it. The constants below name the states of the default spec, for the code
// and tests that refer to them; nothing in the engine depends on any of them existing.
//
// Triggers and causes are small integers so that they travel through the machine
// without allocating; their String methods give the names used in YAML, logs and graphs.
package states
