//go:build !race

package faults_test

// hugeMessage is the size of the error message of TestHugeHandshakeError, as in
// issue 17 (see hostile_race_test.go).
const hugeMessage = 15 << 20
