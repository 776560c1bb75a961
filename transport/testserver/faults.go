package testserver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file holds the switches the fault matrix (package faults) needs beyond
// the ones above: a control file that turns faults on and off while a server
// runs (in process or as a subprocess, across respawns), a journal that counts
// runs of a non-idempotent tool across processes, and a burst of
// tools/list_changed notifications. Each is off unless its Options field is
// set; a server without them behaves exactly as before.

// Control is the content of a control file (see Options.Control): its words,
// each either a name ("hang-initialize") or name=value ("latency=300ms").
type Control map[string]string

// The words of a control file.
const (
	// ControlLatency=DUR delays every request (not notifications) by DUR
	// before the server handles it.
	ControlLatency = "latency"
	// ControlHangInitialize makes initialize (and server/discover) hang
	// until the client gives up, as Options.HangInitialize does.
	ControlHangInitialize = "hang-initialize"
	// ControlGarbage makes the stdio binary write a broken message
	// (GarbageLine) to stdout when it starts, as Options.Garbage does: every respawn does so
	// while the word is in the file.
	ControlGarbage = "garbage"
)

// ReadControl reads a control file. A missing or empty file is an empty
// Control: no fault.
func ReadControl(path string) Control {
	c := Control{}
	if path == "" {
		return c
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return c
	}
	for _, w := range strings.Fields(string(data)) {
		name, value, _ := strings.Cut(w, "=")
		c[name] = value
	}
	return c
}

// Has reports whether the control holds the word name.
func (c Control) Has(name string) bool {
	_, ok := c[name]
	return ok
}

// Duration returns the duration given to name, or 0.
func (c Control) Duration(name string) time.Duration {
	d, err := time.ParseDuration(c[name])
	if err != nil {
		return 0
	}
	return d
}

// WriteControl replaces the control file at path with words, atomically (a
// server never reads half a file). No words: no fault.
func WriteControl(path string, words ...string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".control-*")
	if err != nil {
		return err
	}
	_, werr := tmp.WriteString(strings.Join(words, " ") + "\n")
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// controlled applies the control file to a request about to be handled: its
// latency, and its hang of initialize. It returns an error if the request
// was abandoned.
func (st *server) controlled(ctx context.Context, method string) error {
	if st.opts.Control == "" || strings.HasPrefix(method, "notifications/") {
		return nil
	}
	c := ReadControl(st.opts.Control)
	if d := c.Duration(ControlLatency); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-st.release:
			return errors.New("released")
		}
	}
	if c.Has(ControlHangInitialize) && (method == "initialize" || method == "server/discover") {
		st.hang(ctx)
		return errors.New("initialize abandoned")
	}
	return nil
}

// faultState is the state of the journal and burst tools.
type faultState struct {
	journalMu sync.Mutex
	burst     atomic.Int64 // notifications the next tools/list_changed becomes
	burstSent chan int     // how many the burst sent, for the tool to return
	burstOnce sync.Once    // makes burstSent
}

// addFaultTools adds the tools of Options.Journal and Options.BurstTool.
func (st *server) addFaultTools(s *mcp.Server) {
	if st.opts.Journal != "" {
		mcp.AddTool(s, &mcp.Tool{
			Name: "journal",
			Description: "Appends its id to the journal file, holds ms milliseconds, then returns the id " +
				"(cancelled by its client first, it appends \"cancelled\" and its id). " +
				"Not idempotent: a test counts in the journal how many times each call ran.",
		}, func(ctx context.Context, _ *mcp.CallToolRequest, in struct {
			ID string `json:"id"`
			Ms int    `json:"ms,omitempty"`
		}) (*mcp.CallToolResult, any, error) {
			if err := st.journal(in.ID); err != nil {
				return nil, nil, err
			}
			t := time.NewTimer(time.Duration(in.Ms) * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
				return text(in.ID), nil, nil
			case <-ctx.Done():
				if context.Cause(ctx) == context.Canceled {
					// The client cancelled it (notifications/cancelled, or on
					// 2026-07-28 over HTTP its request's end), rather than
					// its connection ending (whose error is the cause then).
					if err := st.journal("cancelled " + in.ID); err != nil {
						return nil, nil, err
					}
				}
				return nil, nil, ctx.Err()
			case <-st.release:
				return nil, nil, errors.New("released")
			}
		})
	}
	if st.opts.BurstTool {
		st.fault.burstOnce.Do(func() { st.fault.burstSent = make(chan int, 1) })
		s.AddSendingMiddleware(st.burstMiddleware)
		mcp.AddTool(s, &mcp.Tool{
			Name: "tools_changed_burst",
			Description: "Changes the tool list (as change_tools does) and sends the resulting " +
				"notifications/tools/list_changed n times in a row; returns how many were sent.",
		}, func(ctx context.Context, _ *mcp.CallToolRequest, in struct {
			N int `json:"n"`
		}) (*mcp.CallToolResult, any, error) {
			if in.N < 1 {
				return nil, nil, errors.New("n must be at least 1")
			}
			st.fault.burst.Store(int64(in.N))
			st.toggleExtra(s)
			select {
			case sent := <-st.fault.burstSent:
				return text(strconv.Itoa(sent)), nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-st.release:
				return nil, nil, errors.New("released")
			}
		})
	}
}

// journal appends id to the journal file. O_APPEND makes each line's write
// atomic across processes too.
func (st *server) journal(id string) error {
	st.fault.journalMu.Lock()
	defer st.fault.journalMu.Unlock()
	f, err := os.OpenFile(st.opts.Journal, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(id + "\n")
	return errors.Join(werr, f.Close())
}

// burstMiddleware sends a pending burst: the first tools/list_changed
// notification after the burst tool ran goes out n times.
func (st *server) burstMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "notifications/tools/list_changed" {
			return next(ctx, method, req)
		}
		n := st.fault.burst.Swap(0)
		if n == 0 {
			return next(ctx, method, req)
		}
		sent := 0
		var err error
		for range n {
			if _, err = next(ctx, method, req); err != nil {
				break
			}
			sent++
		}
		select {
		case st.fault.burstSent <- sent:
		default:
		}
		return nil, err
	}
}

// ReadJournal returns how many times each id appears in a journal file (see
// Options.Journal), and each "cancelled id" (a run its client cancelled). A
// missing file is an empty journal.
func ReadJournal(path string) (map[string]int, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]int{}, nil
	}
	if err != nil {
		return nil, err
	}
	runs := map[string]int{}
	for _, line := range strings.Split(string(data), "\n") {
		if line != "" {
			runs[line]++
		}
	}
	return runs, nil
}

// AddSamplingTool adds the tool "sample" to s: it asks the client to sample
// (sampling/createMessage) with its text argument as the user message, and
// returns the text of the client's answer. It lets a test see a server's
// request reach the client's CreateMessageHandler. On protocol 2026-07-28,
// where a server may not send requests while serving one, it asks through a
// multi round-trip result (SEP-2322), which the SDK's client fulfils with the
// same handler.
func AddSamplingTool(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name:        "sample",
		Description: "Asks the client to sample with text as the user message; returns the answer's text.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, any, error) {
		params := &mcp.CreateMessageParams{
			MaxTokens: 16,
			Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: in.Text}}},
		}
		var content []mcp.Content
		if ip := req.Session.InitializeParams(); ip != nil && ip.ProtocolVersion >= "2026-07-28" {
			// The server decodes the answer as the with-tools form.
			switch r := req.Params.InputResponses["sample"].(type) {
			case *mcp.CreateMessageResult:
				content = []mcp.Content{r.Content}
			case *mcp.CreateMessageWithToolsResult:
				content = r.Content
			default:
				return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"sample": params}}, nil, nil
			}
		} else {
			res, err := req.Session.CreateMessage(ctx, params)
			if err != nil {
				return nil, nil, err
			}
			content = []mcp.Content{res.Content}
		}
		answer := ""
		for _, c := range content {
			if tc, ok := c.(*mcp.TextContent); ok {
				answer += tc.Text
			}
		}
		return text(answer), nil, nil
	})
}
