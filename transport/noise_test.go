package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
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
		{"a JSON value over lines that is not a message: one line's noise", []part{n("[0,\n 1]\n"), msg1, n("{\n  \"level\": \"info\",\n  \"id\": 3\n}\n"), msg2}, false},
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

// noisePool are the messages FuzzLineNoise's streams are made of (a line
// "\x01" and a byte picks one): a value over two lines, a batch, CRLF, space
// before.
var noisePool = []string{
	`{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}` + "\n",
	`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}` + "\r\n",
	`[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":7,"method":"b"}]` + "\n",
	`  {"jsonrpc":"2.0",` + "\n" + `"id":"x","error":{"code":-1,"message":"m"}}` + "\n",
	`{"jsonrpc":"2.0","id":2,"method":"ping"}` + "\n",
}

// noiseKind is what FuzzLineNoise makes of a line that is not one of noisePool
// (without its "\n"), by the rule in plain words, not by lineConn's code: blank
// (space only, read past by both); noise (the first thing on it is not a brace or
// a bracket; or it is JSON, an object without a "jsonrpc" member or an array
// without such an object; or a brace not followed on its line by a quote, or a
// bracket by a brace, with no JSON value read or begun at its start and no
// "jsonrpc" or escape in it); or neither (a CR inside it, where the go-sdk ends a value's line; a broken message; or a line that says too little
// of itself: left out of the stream).
func noiseKind(line string) (blank, noise bool) {
	t := strings.TrimLeft(line, " \t\r")
	if t == "" {
		return true, false
	}
	if strings.Contains(strings.TrimRight(t, "\r"), "\r") {
		return false, false // a CR after a value ends its line (the go-sdk's rule): noise's text is cut there
	}
	if t[0] != '{' && t[0] != '[' {
		return false, true
	}
	if json.Valid([]byte(t)) {
		var v any
		_ = json.Unmarshal([]byte(t), &v)
		switch v := v.(type) {
		case map[string]any:
			_, tag := v["jsonrpc"]
			return false, !tag
		case []any:
			for _, e := range v {
				if o, ok := e.(map[string]any); ok {
					if _, tag := o["jsonrpc"]; tag {
						return false, false
					}
				}
			}
			return false, true
		}
	}
	if strings.Contains(t, "jsonrpc") || strings.Contains(t, `\`) {
		return false, false
	}
	var v json.RawMessage
	switch err := json.NewDecoder(strings.NewReader(t)).Decode(&v); {
	case err == nil:
		return false, false // a value and more on its line: judged by the value, and where a read ends (see the doc)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return false, false // a value begun ("[0"): the next lines may end it, and it is judged whole (TestLineConnSkipsNoise has such lines)
	}
	next := strings.TrimLeft(t[1:], " \t\r")
	switch {
	case next == "":
		return false, false // what follows on the next lines decides
	case t[0] == '{':
		return false, next[0] != '"'
	default:
		return false, next[0] != '{'
	}
}

// FuzzLineNoise: a stream of messages and lines that are not messages reads, with
// noise set and its reads split anyhow, as the go-sdk's connection reads the
// messages alone, and noise gets the other lines, each once, in order. data is
// the stream's lines: "\x01" and a byte picks a message of noisePool, "\x02" and
// a byte is a banner of that many 512-byte runs (past the decoder's buffer), the
// rest are taken as written if noiseKind says they are noise or blank. splits are
// the sizes of the reads, in turn (a whole read each if empty).
func FuzzLineNoise(f *testing.F) {
	for _, seed := range []struct{ data, splits string }{
		{"Starting...\n\x01\x00\n[INFO] ready\n\x01\x01\n42 tools loaded\n\x01\x02\n", ""},
		{"Starting...\n\x01\x00\n[INFO] ready\n\x01\x01\n42 tools loaded\n\x01\x02\n", "\x00"},
		{"true\n17\nnull\n\"text\"\n\x01\x03\n{\"level\":\"info\",\"id\":1}\n\x01\x04\nbye", "\x02\x05"},
		{"[1, 2, 3\n\x01\x00\n{ a: 1 }\n\x01\x01\n[]\n[ 1, 2 ] x\n\x01\x02\n\"open\n\x01\x00\ntru", "\x00\x01\x02"},
		{"\x02\x80\n\x01\x00\n\x02\x01\n\x01\x01\n404 not found\r\n\x01\x00\n2026-11-28 12:00 INFO\n-\n\x01\x04", "\x3f\xff"},
		{"\x00\xff\xfe\n\x01\x00\n   \n\t\r\n\x01\x01\n\r\rbanner\r\n\x01\x02\n{}\n{} x\n", "\x06"},
	} {
		f.Add([]byte(seed.data), []byte(seed.splits))
	}
	f.Fuzz(func(t *testing.T, data, splits []byte) {
		var all, clean strings.Builder
		var wantNoise []string
		lines := strings.Split(string(data), "\n")
		for i, line := range lines {
			end := "\n"
			if i == len(lines)-1 {
				end = "" // the stream's last line, without its end
			}
			switch {
			case strings.HasPrefix(line, "\x01") && len(line) >= 2:
				msg := noisePool[int(line[1])%len(noisePool)]
				all.WriteString(msg)
				clean.WriteString(msg)
				continue
			case strings.HasPrefix(line, "\x02") && len(line) >= 2:
				line = "banner " + strings.Repeat("y", 512*int(line[1]))
			}
			blank, noise := noiseKind(line)
			switch {
			case blank:
				clean.WriteString(line + end)
			case noise:
				text := strings.TrimLeft(strings.TrimRight(line, "\r"), " \t\r")
				wantNoise = append(wantNoise, strings.TrimRight(text[:min(len(text), maxNoiseText)], " \t"))
			default:
				continue
			}
			all.WriteString(line + end)
		}
		sdk, err := (&mcp.IOTransport{Reader: io.NopCloser(strings.NewReader(clean.String())), Writer: nopWriteCloser{}}).Connect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer sdk.Close()
		var r io.Reader = strings.NewReader(all.String())
		if len(splits) > 0 {
			r = &splitReader{r: r, sizes: splits}
		}
		ours, noise := noiseConn(r)
		defer ours.Close()
		want, got := readBoth(t, sdk, ours)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("stream %q: lineConn with noise and the SDK's stdio connection without it read differently (-sdk +lineConn):\n%s", all.String(), diff)
		}
		// Space after an object or an array that ends a read is read as the
		// space between values, not as more on the value's line: compared without
		// the space that ends a line.
		if diff := cmp.Diff(wantNoise, noise(), cmpopts.EquateEmpty(), cmp.Transformer("trim", func(s string) string { return strings.TrimRight(s, " \t") })); diff != "" {
			t.Errorf("stream %q: noise (-want +got):\n%s", all.String(), diff)
		}
	})
}

// splitReader reads r in reads of the sizes given (each plus one), in turn.
type splitReader struct {
	r     io.Reader
	sizes []byte
	i     int
}

func (s *splitReader) Read(p []byte) (int, error) {
	n := int(s.sizes[s.i%len(s.sizes)]) + 1
	s.i++
	return s.r.Read(p[:min(len(p), n)])
}

// TestNoteNoiseBounded: the lines noteNoise holds for a Stdio.Stderr that does not
// take them are bounded (maxNoiseQueued); the rest are dropped, and counted to it
// once it takes lines again.
func TestNoteNoiseBounded(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var got []string
	tw := &tailWriter{w: writerFunc(func(b []byte) (int, error) {
		<-release
		mu.Lock()
		defer mu.Unlock()
		got = append(got, string(b))
		return len(b), nil
	})}
	line := strings.Repeat("x", 1<<10-1) + "\n"
	for range 200 {
		tw.noteNoise([]byte(line))
	}
	tw.mu.Lock()
	queued := tw.queued
	tw.mu.Unlock()
	if queued > maxNoiseQueued {
		t.Errorf("%d bytes held for a stuck writer, want at most %d", queued, maxNoiseQueued)
	}
	close(release)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		tw.mu.Lock()
		passing := tw.passing
		tw.mu.Unlock()
		if !passing {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// The passer took the first lines queued (up to maxNoiseQueued) at once and
	// waits in Write with them; as many more queue behind it.
	// A count is written at each take of the queue that found lines dropped: two,
	// where lines were dropped before the passer first took the queue.
	lines, dropped := 0, 0
	for _, w := range got {
		var n int
		if _, err := fmt.Sscanf(w, "stdout: (%d lines dropped", &n); err == nil {
			dropped += n
			continue
		}
		lines++
	}
	if max := 2 * maxNoiseQueued / len(line); lines > max || lines+dropped != 200 {
		t.Errorf("the writer got %d lines and a count of %d dropped, want at most %d lines and 200 in all", lines, dropped, max)
	}
	if tail, _ := tw.tail(); tail != strings.Repeat(line, 4) {
		t.Errorf("the tail holds %d bytes, want the last 4 lines", len(tail))
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestLineConnNoiseReaderEnds: the reader goroutine ends on Close while it reads a
// line that is not a message to its end (a banner without its line's end yet), and
// at the stream's end right after such a line.
func TestLineConnNoiseReaderEnds(t *testing.T) {
	before := goleak.IgnoreCurrent()
	pr, pw := io.Pipe()
	c := newLineConn(pr, nopWriteCloser{}, func([]byte) {})
	if _, err := pw.Write([]byte("Starting the server, please wait")); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Read(ctx); !errors.Is(err, io.EOF) {
		t.Errorf("Read after Close = %v, want EOF", err)
	}

	c, noise := noiseConn(strings.NewReader("\n[INFO] bye"))
	if _, err := c.Read(ctx); !errors.Is(err, io.EOF) {
		t.Errorf("Read at the end = %v, want EOF", err)
	}
	if got := noise(); len(got) != 1 || got[0] != "[INFO] bye" {
		t.Errorf("noise = %q, want the last line", got)
	}
	goleak.VerifyNone(t, before)
}
