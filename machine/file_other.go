//go:build !unix

package machine

const openNonblock = 0
