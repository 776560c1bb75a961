package transport

import (
	"context"
	"errors"
	"io"
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
	msg1 := `{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}` + "\n"
	msg2 := `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}` + "\n"
	msg3 := `[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":7,"method":"b"}]` + "\n"
	long := strings.Repeat("x", 100<<10) // longer than the decoder's buffer
	for _, tc := range []struct {
		name   string
		stream []string // lines that are messages (or broken ones) and noise, in order
		noise  []string // the lines noise should get
		slow   bool     // read one byte at a time
	}{
		{
			name:   "banners and logs between messages",
			stream: []string{"Starting server on stdio...\n", msg1, "[INFO] ready\n", `{"level":"info","msg":"listening"}` + "\n", msg2, "42 tools loaded\n", "true\n", `"text"` + "\n", "17\n", "null\n", msg3},
			noise:  []string{"Starting server on stdio...", "[INFO] ready", `{"level":"info","msg":"listening"}`, "42 tools loaded", "true", `"text"`, "17", "null"},
		},
		{
			name:   "one byte at a time",
			stream: []string{"Starting server on stdio...\n", msg1, "[INFO] ready\r\n", msg2, "42 tools loaded\n", msg3},
			noise:  []string{"Starting server on stdio...", "[INFO] ready", "42 tools loaded"},
			slow:   true,
		},
		{
			name:   "a long banner, cut where noise is handed it",
			stream: []string{"banner " + long + "\n", msg1, "404 " + long + "\n", msg2},
			noise:  []string{("banner " + long)[:maxNoiseText], ("404 " + long)[:maxNoiseText]},
		},
		{
			name:   "a banner spread over lines after a bracket",
			stream: []string{"[\n  INFO ready\n", msg1},
			noise:  []string{"[\n  INFO ready"},
		},
		{
			name:   "a last line without its end",
			stream: []string{msg1, "bye"},
			noise:  []string{"bye"},
		},
		{
			name:   "an object's keys in the wrong case say nothing of a message",
			stream: []string{`{"JSONRPC":"2.0","ID":1,"Result":{}}` + "\n", msg1},
			noise:  []string{`{"JSONRPC":"2.0","ID":1,"Result":{}}`},
		},
		{
			name:   "a broken message ends it",
			stream: []string{"banner\n", msg1, `{"jsonrpc":"2.0", this is not JSON-RPC}` + "\n", msg2},
			noise:  []string{"banner"},
		},
		{
			name:   "a broken batch ends it",
			stream: []string{msg1, `[{"jsonrpc":"2.0" oops]` + "\n", msg2},
		},
		{
			name:   "a message with a wrong version ends it",
			stream: []string{msg1, `{"jsonrpc":"1.0","id":1,"result":{}}` + "\n", msg2},
		},
		{
			name:   "a message and more on its line ends it",
			stream: []string{`{"jsonrpc":"2.0","id":1,"result":{}} and more` + "\n", msg2},
		},
		{
			name:   "a batch of scalars ends it",
			stream: []string{msg1, "[1,2]\n", msg2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var clean strings.Builder
			for _, l := range tc.stream {
				if !slicesContains(tc.noise, strings.TrimRight(l, "\r\n")) && !strings.HasPrefix(l, "banner ") && !strings.HasPrefix(l, "404 ") && !strings.HasPrefix(l, "[\n") && l != "bye" {
					clean.WriteString(l)
				}
			}
			sdk, err := (&mcp.IOTransport{Reader: io.NopCloser(strings.NewReader(clean.String())), Writer: nopWriteCloser{}}).Connect(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer sdk.Close()
			var r io.Reader = strings.NewReader(strings.Join(tc.stream, ""))
			if tc.slow {
				r = iotest.OneByteReader(r)
			}
			ours, noise := noiseConn(r)
			defer ours.Close()
			want, got := readAll(t, sdk), readAll(t, ours)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("lineConn with noise and the SDK's stdio connection without it read differently (-sdk +lineConn):\n%s", diff)
			}
			if diff := cmp.Diff(tc.noise, noise()); diff != "" {
				t.Errorf("noise (-want +got):\n%s", diff)
			}
		})
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
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
