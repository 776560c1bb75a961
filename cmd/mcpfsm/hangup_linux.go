package main

import "golang.org/x/sys/unix"

// pollRDHUP is poll(2)'s flag for a socket whose peer has shut down writing: a
// host whose stdin is one end of a socket pair (libuv's, and so Node's, child
// stdio) and that ends it with shutdown(2) hangs up so, not with POLLHUP.
const pollRDHUP = unix.POLLRDHUP
