package machine

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
)

// TestLighten (issue 17 item 6): a history keeps capped text of an error and its short
// leaves, not a server's megabytes; errors.Is still sees the leaves it kept.
func TestLighten(t *testing.T) {
	huge := errors.New(strings.Repeat("e", 15<<20))
	err := fmt.Errorf("initialize: %w", errors.Join(huge, syscall.ECONNRESET, io.EOF))
	l := lighten(err)
	if n := len(l.Error()); n > MaxErrorText+64 {
		t.Errorf("kept %d bytes of text", n)
	}
	if !errors.Is(l, syscall.ECONNRESET) || !errors.Is(l, io.EOF) || errors.Is(l, huge) {
		t.Errorf("the leaves kept: Is ECONNRESET %v, EOF %v, the huge one %v", errors.Is(l, syscall.ECONNRESET), errors.Is(l, io.EOF), errors.Is(l, huge))
	}
	small := fmt.Errorf("dial: %w", syscall.ECONNREFUSED)
	if lighten(small) != small {
		t.Error("a small error is not kept whole")
	}
	if lighten(nil) != nil {
		t.Error("lighten(nil) is not nil")
	}
	var typedNil *FileError
	_ = lighten(fmt.Errorf("x: %w", error(typedNil))) // must not panic
}
