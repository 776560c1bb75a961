//go:build race

package faults_test

// hugeMessage is the size of the error message of TestHugeHandshakeError: 4 MiB
// under the race detector, which takes seconds to encode and decode 15 MiB
// (docs/reliability.md quotes a run without it, at 15 MiB, as in issue 17).
const hugeMessage = 4 << 20
