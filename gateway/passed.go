package gateway

import (
	"crypto/rand"
	"strconv"
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
//
// Each error held is handed to the go-sdk under a message of its own, its key (the
// backend's message, a tag no backend can guess and a number), by which the
// answer's writer finds it again: the answer to a request is not otherwise told
// from the answer to another of its POST (a 2025-03-26 batch), and errors found by
// the backend's message alone went, where two of a batch had one message and
// answers were written in another order than the errors came back, each to the
// other's request.
type passedOn struct {
	mu   sync.Mutex
	by   map[string][]heldError // by POST; a POST being served is a key
	tag  string                 // random, made once
	next uint64
}

// A heldError is a backend's error held for its answer: key is the message the
// go-sdk writes it with.
type heldError struct {
	key string
	e   *jsonrpc.Error
}

// open begins holding the errors of post.
func (p *passedOn) open(post string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.by == nil {
		p.by = map[string][]heldError{}
	}
	p.by[post] = nil
}

// close forgets post's errors.
func (p *passedOn) close(post string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.by, post)
}

// add holds e, with data, for post, if post is being served, and returns the
// message it is to be answered with (its key, for take); e's own if it is not held.
func (p *passedOn) add(post string, e *jsonrpc.Error) string {
	if post == "" || e.Data == nil {
		return e.Message
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	errs, ok := p.by[post]
	if !ok {
		return e.Message
	}
	if p.tag == "" {
		p.tag = rand.Text()[:10]
	}
	p.next++
	key := e.Message + " [passed " + p.tag + "." + strconv.FormatUint(p.next, 10) + "]"
	p.by[post] = append(errs, heldError{key: key, e: e})
	return key
}

// take returns the error held for post under key (the message of an answer), and
// holds it no more; nil if none is.
func (p *passedOn) take(post, key string) *jsonrpc.Error {
	p.mu.Lock()
	defer p.mu.Unlock()
	errs := p.by[post]
	for i, h := range errs {
		if h.key == key {
			p.by[post] = append(errs[:i:i], errs[i+1:]...)
			return h.e
		}
	}
	return nil
}

// passOn returns a backend's error je as the gateway answers the front request req
// with it, for the front's client to get it as the backend sent it (see
// transport.PassError): held for req's POST too, if it came over HTTP, and
// answered under its key there.
func (g *Gateway) passOn(req mcp.Request, je *jsonrpc.Error) error {
	if je.Code == jsonrpc.CodeMethodNotFound { // passed as no other (see transport.PassError)
		if extra := req.GetExtra(); extra != nil && extra.Header != nil {
			if key := g.passed.add(extra.Header.Get(postHeader), je); key != je.Message {
				return transport.PassError(&jsonrpc.Error{Code: je.Code, Message: key, Data: je.Data})
			}
		}
	}
	return transport.PassError(je)
}
