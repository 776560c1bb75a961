// Package turn gives out turns by key: at most one holder per key at a time, and
// a waiter that gives up when its context ends.
//
// mcpfsm takes a turn per resource wherever an operation and the bookkeeping it
// implies must not interleave with another for the same resource: a session's
// Subscribe and Unsubscribe (package transport), and the gateway's count of front
// subscriptions with the backend subscribe or unsubscribe it leads to.
package turn
