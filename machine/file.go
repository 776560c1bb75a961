package machine

import (
	"fmt"
	"io"
	"os"
)

// ReadFile reads a spec or config file: a regular file of at most MaxSpecSize bytes.
// Anything else (a FIFO, a device such as /dev/zero, a directory) is refused without
// being read, so that a path in a config can neither hang a load nor grow its memory.
func ReadFile(path string) ([]byte, error) {
	// Opened without blocking: opening a FIFO for reading would wait for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, fileKind(fi.Mode()))
	}
	if fi.Size() > MaxSpecSize {
		return nil, fmt.Errorf("%s: file is larger than %d bytes", path, MaxSpecSize)
	}
	// Read one byte past the limit, so that a file that grew since Stat is caught.
	data, err := io.ReadAll(io.LimitReader(f, MaxSpecSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSpecSize {
		return nil, fmt.Errorf("%s: file is larger than %d bytes", path, MaxSpecSize)
	}
	return data, nil
}

func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "mode " + m.String()
}
