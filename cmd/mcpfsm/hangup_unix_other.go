//go:build unix && !linux

package main

// pollRDHUP is Linux's (see hangup_linux.go); elsewhere a half-closed socket is not
// told apart.
const pollRDHUP = 0
