package gateway

import "time"

// SetBodyWait sets how long a request waits for room for its body, for the
// handlers made until the returned function restores it.
func SetBodyWait(d time.Duration) (restore func()) {
	old := bodyWait
	bodyWait = d
	return func() { bodyWait = old }
}
