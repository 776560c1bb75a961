//go:build !unix

package main

import "os"

// cuttableStdout: a write to stdout cannot be cut short where poll(2) is not at hand.
func cuttableStdout() (f *os.File, restore func()) { return nil, nil }
