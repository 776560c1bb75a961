package gateway

import (
	"sync"

	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// passedOn holds, by HTTP POST (its postHeader), the backends' errors of code
// -32601 that its requests were answered with, until the POST's answers have been
// written: the go-sdk's encoding of such an error keeps its code and message but
// drops its data (see transport.PassError), which the POST's deadlineWriter puts
// back (transport.PassedAnswer). Only a POST being served holds any: an error of
// one served no more is not kept.
type passedOn struct {
	mu sync.Mutex
	by map[string][]*jsonrpc.Error // by POST; a POST being served is a key
}

// open begins holding the errors of post.
func (p *passedOn) open(post string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.by == nil {
		p.by = map[string][]*jsonrpc.Error{}
	}
	p.by[post] = nil
}

// close forgets post's errors.
func (p *passedOn) close(post string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.by, post)
}

// add holds e, with data, for post, if post is being served.
func (p *passedOn) add(post string, e *jsonrpc.Error) {
	if post == "" || e.Data == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if errs, ok := p.by[post]; ok {
		p.by[post] = append(errs, e)
	}
}

// take returns the first error held for post whose message is message, and holds
// it no more; nil if none is.
func (p *passedOn) take(post, message string) *jsonrpc.Error {
	p.mu.Lock()
	defer p.mu.Unlock()
	errs := p.by[post]
	for i, e := range errs {
		if e.Message == message {
			p.by[post] = append(errs[:i:i], errs[i+1:]...)
			return e
		}
	}
	return nil
}

// passOn returns a backend's error je as the gateway answers the front request req
// with it, for the front's client to get it as the backend sent it (see
// transport.PassError): held for req's POST too, if it came over HTTP.
func (g *Gateway) passOn(req mcp.Request, je *jsonrpc.Error) error {
	if je.Code == jsonrpc.CodeMethodNotFound { // passed as no other (see transport.PassError)
		if extra := req.GetExtra(); extra != nil && extra.Header != nil {
			g.passed.add(extra.Header.Get(postHeader), je)
		}
	}
	return transport.PassError(je)
}
