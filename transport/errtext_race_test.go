//go:build race

package transport

// hugeError is the size of TestErrorTextCapped's error message: 4 MiB under the
// race detector, which takes seconds of CPU to encode and decode 15 MiB (under a
// CPU hog, past the call's deadline), as TestHugeHandshakeError does in package
// faults.
const hugeError = 4 << 20
