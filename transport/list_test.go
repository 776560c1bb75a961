package transport

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// endlessLists is a server whose tools/list answers a page of perPage tools
// and a fresh cursor, forever; pages counts the pages it served.
func endlessLists(perPage int, pages *atomic.Int64) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "endless", Version: "1"}, nil)
	tools := endlessPage(perPage)
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "tools/list" {
				return next(ctx, method, req)
			}
			n := pages.Add(1)
			return &mcp.ListToolsResult{Tools: tools, NextCursor: "c" + strconv.FormatInt(n, 10)}, nil
		}
	})
	return srv
}

// endlessPage is a page of endlessLists.
func endlessPage(perPage int) []*mcp.Tool {
	tools := make([]*mcp.Tool, perPage)
	for i := range tools {
		tools[i] = &mcp.Tool{Name: "t" + strconv.Itoa(i), InputSchema: map[string]any{"type": "object"}}
	}
	return tools
}

// TestListToolsCapped (issue 17, item 5): a tools/list that hands out a fresh
// cursor forever fails after MaxListPages pages, and one whose pages add up
// to more than MaxListItems tools, or MaxListBytes bytes of them, fails there,
// with ErrListTooLong. (Pages as large as a message each, 16 MiB, were bounded
// only by the pages: 16 GB.)
func TestListToolsCapped(t *testing.T) {
	for _, tc := range []struct {
		name      string
		perPage   int
		wantPages int64
	}{
		{"pages", 1, MaxListPages},
		// MaxListItems tools cost seconds to decode: the test lowers it.
		{"items", 500, 10_000/500 + 1},
		// So does MaxListBytes: a page of 500 tools is some 25 KB of JSON.
		{"bytes", 500, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			switch tc.name {
			case "items":
				defer func(old int) { maxListItems = old }(maxListItems)
				maxListItems = 10_000
			case "bytes":
				defer func(old int) { maxListBytes = old }(maxListBytes)
				maxListBytes = 3*jsonSize(endlessPage(500)) + 1
			}
			var pages atomic.Int64
			s := dial(t, Config{Name: "endless", InMemory: &InMemory{Server: endlessLists(tc.perPage, &pages)}}, Options{})
			runtime.GC()
			stop := heapPeak()
			start := time.Now()
			tools, err := s.ListTools(callCtx(t))
			d := time.Since(start)
			peak := stop()
			t.Logf("ListTools failed after %v and %d pages, peak heap %d MiB: %v", d, pages.Load(), peak>>20, err)
			if tools != nil || !errors.Is(err, ErrListTooLong) {
				t.Errorf("ListTools = %d tools, %v; want ErrListTooLong", len(tools), err)
			}
			var te *Error
			if !errors.As(err, &te) || te.Op != OpListTools {
				t.Errorf("ListTools = %v, want an *Error with Op %q", err, OpListTools)
			}
			if got := pages.Load(); got != tc.wantPages {
				t.Errorf("the server served %d pages, want %d", got, tc.wantPages)
			}
		})
	}
}
