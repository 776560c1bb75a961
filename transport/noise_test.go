package transport

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// noiseConn is a lineConn that keeps the lines handed to its noise.
func noiseConn(r io.Reader) (*lineConn, func() []string) {
	var mu sync.Mutex
	var lines []string
	c := newLineConn(io.NopCloser(r), nopWriteCloser{}, func(line []byte) {
		mu.Lock()
		lines = append(lines, string(line))
		mu.Unlock()
	})
	return c, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return lines
	}
}

// TestLineConnSkipsNoise: a stdio server's lines that are not messages and could
// not be one (a banner, a log record, a number and more on its line, a scalar) are
// handed to noise and skipped; what lineConn reads of the stream is what the go-sdk's
// connection reads of it without them. A line that starts as a message and is
// broken still ends the connection.
func TestLineConnSkipsNoise(t *testing.T) {
	type part struct {
		text  string
		noise bool
	}
	m := func(text string) part { return part{text: text} }
	n := func(text string) part { return part{text: text, noise: true} }
	msg1 := m(`{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}` + "\n")
	msg2 := m(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}` + "\n")
	msg3 := m(`[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":7,"method":"b"}]` + "\n")
	long := strings.Repeat("x", 100<<10) // longer than the decoder's buffer
	for _, tc := range []struct {
		name   string
		stream []part
		slow   bool // read one byte at a time
	}{
		{"banners and logs between messages", []part{n("Starting server on stdio...\n"), msg1, n("[INFO] ready\n"), n(`{"level":"info","msg":"listening"}` + "\n"), msg2,
			n("42 tools loaded\n"), n("true\n"), n(`"text"` + "\n"), n("17\n"), n("null\n"), msg3}, false},
		{"one byte at a time", []part{n("Starting server on stdio...\n"), msg1, n("[INFO] ready\r\n"), msg2, n("42 tools loaded\n"), msg3}, true},
		{"long lines, cut where noise is handed them", []part{n("banner " + long + "\n"), msg1, n("404 " + long + "\n"), msg2}, false},
		{"a banner spread over lines after a bracket: a line each", []part{n("[\n"), n("  INFO ready\n"), msg1}, false},
		{"a bracket or a brace left open, and a message on the next line", []part{n("[1, 2, 3\n"), msg1, n("{\n"), msg2, n(`["a",` + "\n"), msg3}, false},
		{"the same one byte at a time", []part{n("[1, 2, 3\n"), msg1, n("{\r\n"), msg2}, true},
		{"a last line without its end", []part{msg1, n("bye")}, false},
		{"a last line cut off in a literal", []part{msg1, n("tru")}, false},
		{"a last line cut off in a string", []part{msg1, n(`"open`)}, false},
		{"an object's keys in the wrong case say nothing of a message", []part{n(`{"JSONRPC":"2.0","ID":1,"Result":{}}` + "\n"), msg1}, false},
		{"a broken message ends it", []part{n("banner\n"), msg1, m(`{"jsonrpc":"2.0", this is not JSON-RPC}` + "\n"), msg2}, false},
		{"a broken batch ends it", []part{msg1, m(`[{"jsonrpc":"2.0" oops]` + "\n"), msg2}, false},
		{"a message with a wrong version ends it", []part{msg1, m(`{"jsonrpc":"1.0","id":1,"result":{}}` + "\n"), msg2}, false},
		{"a message and more on its line ends it", []part{m(`{"jsonrpc":"2.0","id":1,"result":{}} and more` + "\n"), msg2}, false},
		{"a batch with a broken message ends it", []part{msg1, m(`[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"1.0","id":1,"result":{}}]` + "\n"), msg2}, false},
		{"a message whose version tag is null ends it, as the go-sdk ends", []part{msg1, m(`{"jsonrpc":null,"id":1,"result":{}}` + "\n"), msg2}, false},
		{"a log record's id, method, result or error say nothing of a message", []part{n(`{"time":"2026-11-28T12:00:00Z","level":"ERROR","msg":"fetch failed","error":"connection refused"}` + "\n"), msg1,
			n(`{"id":42,"method":"GET","path":"/health","result":"ok"}` + "\n"), n(`{"level":"info","id":7} and more` + "\n"), msg2}, false},
		{"printed lists", []part{n("[1, 2]\n"), n("[]\n"), n(`["a", {"b": 1}]` + "\n"), msg1, n("[ 1, 2 ] total\n"), msg2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var all, clean strings.Builder
			var wantNoise []string
			for _, p := range tc.stream {
				all.WriteString(p.text)
				if !p.noise {
					clean.WriteString(p.text)
					continue
				}
				line := strings.TrimLeft(strings.TrimRight(p.text, "\r\n"), " \t")
				wantNoise = append(wantNoise, line[:min(len(line), maxNoiseText)])
			}
			sdk, err := (&mcp.IOTransport{Reader: io.NopCloser(strings.NewReader(clean.String())), Writer: nopWriteCloser{}}).Connect(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer sdk.Close()
			var r io.Reader = strings.NewReader(all.String())
			if tc.slow {
				r = iotest.OneByteReader(r)
			}
			ours, noise := noiseConn(r)
			defer ours.Close()
			want, got := readBoth(t, sdk, ours)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("lineConn with noise and the SDK's stdio connection without it read differently (-sdk +lineConn):\n%s", diff)
			}
			if diff := cmp.Diff(wantNoise, noise()); diff != "" {
				t.Errorf("noise (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLineConnNoiseOverTheLineLimit: a line that is not a message is read to its
// end within maxLineLength as a message is; past it, the connection ends with
// errLineTooLong, in bounded memory.
func TestLineConnNoiseOverTheLineLimit(t *testing.T) {
	r := io.MultiReader(strings.NewReader("banner "), &endless{}, strings.NewReader("\n"))
	c, noise := noiseConn(r)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Read(ctx)
	if !errors.Is(err, errLineTooLong) {
		t.Fatalf("Read = %v, want %v", err, errLineTooLong)
	}
	if n := len(noise()); n != 0 {
		t.Errorf("noise got %d lines, want none", n)
	}
}

// endless reads as an endless run of x.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// TestLineConnNoiseCostPerLine: a run of short lines that are not messages costs
// a bounded amount per line, however long the run and whatever was read before
// it: after a 1 MiB message (the decoder's buffer grown to match, so one read
// takes a pipe's worth), each line put back what its decoder read past it in
// front of the rest, copying the rest: the bytes allocated per line grew with
// the run (35 KB a line for 6,000 lines).
func TestLineConnNoiseCostPerLine(t *testing.T) {
	const lines = 20000
	big := `{"jsonrpc":"2.0","id":1,"result":{"x":"` + strings.Repeat("x", 1<<20) + `"}}` + "\n"
	r := &chunkReader{chunks: []string{big, strings.Repeat("noise one\n", lines)}}
	c, noise := noiseConn(r)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Read(ctx); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := c.Read(ctx)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("Read = %v, want EOF", err)
	}
	if n := len(noise()); n != lines {
		t.Fatalf("noise got %d lines, want %d", n, lines)
	}
	if per := (after.TotalAlloc - before.TotalAlloc) / lines; per > 8<<10 {
		t.Errorf("%d bytes allocated a line that is not a message, want at most 8 KiB", per)
	}
}

// chunkReader reads its chunks, each at most in one read.
type chunkReader struct{ chunks []string }

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	if c.chunks[0] = c.chunks[0][n:]; c.chunks[0] == "" {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}
