//go:build !race

package transport

// hugeError is the size of TestErrorTextCapped's error message, as in issue 17
// (see errtext_race_test.go).
const hugeError = 15 << 20
