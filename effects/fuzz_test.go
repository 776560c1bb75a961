package effects

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// FuzzClassify builds arbitrary error trees out of the values the classifier reads (the
// SDK's sentinels and JSON-RPC codes, errnos, context and machine errors, forced closes,
// *transport.Error with HTTP statuses, joins, wraps, typed nils, nil kids, deep chains)
// and checks that Classify never panics, always returns a cause, and obeys the rules its
// doc comment states:
//
//   - a non-nil error is never CauseNone;
//   - ownClose only turns noise into an artifact: Classify(err, false) is
//     Classify(err, true) or lost, and the same whenever the latter counts;
//   - a leaf that counts whoever closes (refused, ENOENT, ETIMEDOUT, a deadline, an
//     expired session) makes the whole count, closing or not, unless a forced close
//     holds it;
//   - joining composes: Classify(Join(a, b)) is the graver counting cause of the two if
//     either counts, else a's cause unless it is an artifact, else b's; so joining a
//     counting cause to anything keeps it counting, in either order;
//   - wrapping (%w, *transport.Error without a status, a one-element join) changes
//     nothing;
//   - an error with nothing inside (a multi-error of nil kids, a typed nil) is classified
//     as an opaque error is.
//
// go test ./effects runs the seeds; go test ./effects -run '^$' -fuzz FuzzClassify
// explores.
func FuzzClassify(f *testing.F) {
	for _, seed := range classifySeeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		nodes := buildTrees(data)
		top := nodes[len(nodes)-1]
		checkClassify(t, top)
		if len(nodes) >= 2 {
			checkJoin(t, nodes[len(nodes)-2], top)
		}
	})
}

// checkClassify checks the rules that hold for one tree.
func checkClassify(t *testing.T, n node) {
	t.Helper()
	if n.err == nil {
		for _, own := range []bool{false, true} {
			if got := Classify(nil, own); got != states.CauseNone {
				t.Fatalf("Classify(nil, %v) = %s", own, got)
			}
		}
		return
	}
	closing, notClosing := Classify(n.err, true), Classify(n.err, false)
	for _, c := range []states.Cause{closing, notClosing} {
		if c == states.CauseNone || !slices.Contains(states.AllCauses(), c) {
			t.Fatalf("Classify(%s) = %d, not a cause", n, c)
		}
	}
	if closing != notClosing && (notClosing != states.CauseLost || closing.Counts()) {
		t.Fatalf("ownClose changed %s from %s to %s; it may only turn lost into something else", n, notClosing, closing)
	}
	unfixable := n.cfg || n.cfgSt
	if unfixable && (closing != states.CauseConfig || notClosing != states.CauseConfig) {
		t.Fatalf("%s holds a failure retrying cannot fix, classified %s (closing) and %s", n, closing, notClosing)
	}
	if (n.hard || n.hardSt) && !unfixable && (!closing.Counts() || !notClosing.Counts()) {
		t.Fatalf("%s holds a failure that counts whoever closes, classified %s (closing) and %s", n, closing, notClosing)
	}
	if n.empty {
		for _, own := range []bool{false, true} {
			if got, want := Classify(n.err, own), Classify(errOpaque, own); got != want {
				t.Fatalf("Classify(%s, %v) = %s; an error with nothing inside is classified as an opaque one: %s", n, own, got, want)
			}
		}
	}
	if n.err == transport.ErrForcedClose {
		return // a bare forced-close marker is not wrapped as the rules below assume
	}
	for _, own := range []bool{false, true} {
		want := Classify(n.err, own)
		for _, w := range []error{
			fmt.Errorf("context: %w", n.err),
			&transport.Error{Server: "s", Op: transport.OpCallTool, Err: n.err},
			errors.Join(n.err),
			errors.Join(nil, n.err, nil),
			multi{nil, n.err},
		} {
			if got := Classify(w, own); got != want {
				t.Fatalf("Classify(%T over %s, %v) = %s, want %s as without it", w, n, own, got, want)
			}
		}
		if got := Classify(n.err, own); got != want {
			t.Fatalf("Classify(%s, %v) gave %s, then %s", n, own, want, got)
		}
	}
}

// checkJoin checks that joining two trees composes their causes.
func checkJoin(t *testing.T, a, b node) {
	t.Helper()
	if a.err == nil || b.err == nil || a.err == transport.ErrForcedClose || b.err == transport.ErrForcedClose {
		return // errors.Join drops nils; a forced-close marker makes its join one leaf
	}
	for _, own := range []bool{false, true} {
		ca, cb := Classify(a.err, own), Classify(b.err, own)
		if got, want := Classify(errors.Join(a.err, b.err), own), compose(ca, cb); got != want {
			t.Fatalf("Classify(Join(%s, %s), %v) = %s, want %s from %s and %s", a, b, own, got, want, ca, cb)
		}
		if got, want := Classify(fmt.Errorf("%w; %w", b.err, a.err), own), compose(cb, ca); got != want {
			t.Fatalf("Classify(%s; %s, %v) = %s, want %s from %s and %s", b, a, own, got, want, cb, ca)
		}
	}
}

// compose is the documented rule for a join of an error of cause a and one of cause b,
// in that order.
func compose(a, b states.Cause) states.Cause {
	switch {
	case a == states.CauseConfig || b == states.CauseConfig:
		return states.CauseConfig
	case a.Counts() || b.Counts():
		if gravity(b) > gravity(a) {
			return b
		}
		if a.Counts() {
			return a
		}
		return b
	case a != states.CauseArtifact:
		return a
	}
	return b
}

// A node is a built error with what the classifier must make of it.
type node struct {
	err error
	// hard: a leaf that counts whether or not we are closing (refused, ETIMEDOUT, a
	// deadline, an expired session) is reached by the classifier's walk, not held
	// inside a forced close, and not on a path an HTTP status decides (401 and 403
	// are auth, 404 during a dial is config). hardSt: the same, on a path with an
	// HTTP status that decides nothing.
	hard, hardSt bool
	// cfg: a leaf that makes the whole config whoever closes (ENOENT, EACCES,
	// ENOEXEC, exec.ErrNotFound), or a dial's 404 over a path with no status of its
	// own; cfgSt: a config leaf under a status that decides nothing.
	cfg, cfgSt bool
	// bare: some path to a leaf crosses no HTTP status.
	bare bool
	// empty: the error has no leaf with any information (a multi-error of nil kids,
	// a typed nil), so it is as good as an opaque error.
	empty bool
	desc  string
}

// or gathers what a kid of a join holds.
func (n *node) or(kid node) {
	n.hard = n.hard || kid.hard
	n.hardSt = n.hardSt || kid.hardSt
	n.cfg = n.cfg || kid.cfg
	n.cfgSt = n.cfgSt || kid.cfgSt
	n.bare = n.bare || kid.bare || kid.err == nil
}

func (n node) String() string {
	if len(n.desc) > 300 {
		return n.desc[:300] + "..."
	}
	return n.desc
}

var errOpaque = errors.New("something went wrong")

// The tree builder reads data as a program for a stack machine: each byte is an
// operation, some followed by an operand byte. Leaves are pushed, wrappers replace the
// top, joins pop several and push one. Sizes are bounded so that one input stays cheap.
const (
	maxOps   = 4096
	maxStack = 64
	maxDepth = 50_000
)

const (
	opLeaf      = iota // operand: index into leaves
	opCode             // operand: index into codes, or a raw code
	opErrno            // operand: the errno
	opTypedNil         // operand: index into typedNils
	opNil              // a nil kid, for joins
	opWrap             // fmt.Errorf("...: %w")
	opStatus           // operand: index into statuses; *transport.Error with HTTPStatus
	opNetOp            // *net.OpError around the top
	opSyscall          // *os.SyscallError around the top
	opOpaque           // a wrapper that hides the top (no Unwrap)
	opNilUnwrap        // a wrapper whose Unwrap returns nil
	opJoin             // operand: how many to join (1-4), errors.Join
	opMultiW           // fmt.Errorf with two %w
	opMulti            // operand: kids count and nil-kid bits; a custom Unwrap() []error
	opForced           // fmt.Errorf("%w: %w", transport.ErrForcedClose, top): the forced-close shape
	opDeep             // operand: depth/16; a chain of plain wrappers
	opCount
)

var leaves = []error{
	mcp.ErrConnectionClosed, mcp.ErrSessionMissing, mcp.ErrEventsPurged,
	io.EOF, io.ErrUnexpectedEOF, io.ErrClosedPipe, net.ErrClosed, os.ErrProcessDone,
	context.Canceled, context.DeadlineExceeded, os.ErrDeadlineExceeded,
	machine.ErrClosed, machine.ErrEffectTimeout, transport.ErrForcedClose,
	errOpaque, &exec.ExitError{}, syntaxErr, &json.UnmarshalTypeError{Value: "x"}, exec.ErrNotFound,
	netTimeout{timeout: true}, netTimeout{timeout: false},
	syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE, syscall.ETIMEDOUT, syscall.ENOENT,
}

// hardLeaves count whoever closes.
var hardLeaves = []error{
	mcp.ErrSessionMissing, context.DeadlineExceeded, os.ErrDeadlineExceeded, machine.ErrEffectTimeout,
	netTimeout{timeout: true}, syscall.ECONNREFUSED, syscall.ETIMEDOUT, syntaxErr,
}

var syntaxErr error = &json.SyntaxError{Offset: 3}

// cfgLeaves make the whole config whoever closes: retrying cannot help.
var cfgLeaves = []error{syscall.ENOENT, syscall.EACCES, syscall.ENOEXEC, syscall.ENOTDIR, syscall.EISDIR, exec.ErrNotFound}

func isIn(list []error, e error) bool {
	for _, x := range list {
		if x == e {
			return true
		}
		if a, ok := x.(*json.SyntaxError); ok {
			if b, ok := e.(*json.SyntaxError); ok && a == b {
				return true
			}
		}
	}
	return false
}

var codes = []int64{
	codeClientClosing, codeServerClosing, codeRejected, jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest,
	jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidParams, jsonrpc.CodeInternalError, 0,
}

var statuses = []int{0, 200, 204, 301, 400, 401, 403, 404, 418, 429, 500, 502, 503, 504, 599, -1}

var typedNils = []error{(*transport.Error)(nil), (*jsonrpc.Error)(nil), (*net.OpError)(nil), (*exec.ExitError)(nil), (*os.SyscallError)(nil), (*json.SyntaxError)(nil), (*reasonError)(nil)}

// netTimeout is a net.Error that is not one of the standard library's.
type netTimeout struct{ timeout bool }

func (e netTimeout) Error() string   { return fmt.Sprintf("i/o (timeout %v)", e.timeout) }
func (e netTimeout) Timeout() bool   { return e.timeout }
func (e netTimeout) Temporary() bool { return false }

// multi is a multi-error that, unlike errors.Join, keeps nil kids.
type multi []error

func (m multi) Error() string   { return fmt.Sprintf("%d errors", len(m)) }
func (m multi) Unwrap() []error { return m }

// opaque holds an error without letting anyone unwrap it.
type opaque struct{ inner error }

func (opaque) Error() string { return "opaque" }

// nilUnwrap has an Unwrap method that finds nothing.
type nilUnwrap struct{}

func (nilUnwrap) Error() string { return "nil unwrap" }
func (nilUnwrap) Unwrap() error { return nil }

// chain is a cheap wrapper for deep nesting.
type chain struct{ inner error }

func (c chain) Error() string { return "chain" }
func (c chain) Unwrap() error { return c.inner }

// buildTrees runs data and returns the stack, bottom first; never empty.
func buildTrees(data []byte) []node {
	var st []node
	r := bytes.NewReader(data)
	arg := func() int {
		b, err := r.ReadByte()
		if err != nil {
			return 0
		}
		return int(b)
	}
	pop := func() node {
		if len(st) == 0 {
			return node{err: errOpaque, desc: "opaque"}
		}
		n := st[len(st)-1]
		st = st[:len(st)-1]
		return n
	}
	depth := 0
	for ops := 0; ops < maxOps; ops++ {
		b, err := r.ReadByte()
		if err != nil {
			break
		}
		if len(st) >= maxStack {
			st = st[1:]
		}
		op := int(b) % opCount
		switch op {
		case opLeaf:
			e := leaves[arg()%len(leaves)]
			st = append(st, node{err: e, hard: isIn(hardLeaves, e), cfg: isIn(cfgLeaves, e), bare: true, desc: fmt.Sprintf("%T#%d", e, slices.Index(leaves, e))})
		case opCode:
			a := arg()
			code := int64(int8(a)) - 32000 // a raw code near the JSON-RPC range
			if a < 2*len(codes) {
				code = codes[a%len(codes)]
			}
			st = append(st, node{err: &jsonrpc.Error{Code: code, Message: "rpc"}, bare: true, desc: fmt.Sprintf("jsonrpc(%d)", code)})
		case opErrno:
			e := syscall.Errno(arg())
			st = append(st, node{err: e, hard: isIn(hardLeaves, error(e)), cfg: isIn(cfgLeaves, error(e)), bare: true, desc: fmt.Sprintf("errno(%d)", int(e))})
		case opTypedNil:
			e := typedNils[arg()%len(typedNils)]
			st = append(st, node{err: e, empty: true, bare: true, desc: fmt.Sprintf("(%T)(nil)", e)})
		case opNil:
			st = append(st, node{desc: "nil"})
		case opWrap:
			n := pop()
			if n.err == nil {
				n.err, n.desc = errOpaque, "opaque"
			}
			n.err, n.desc = fmt.Errorf("op: %w", n.err), "wrap("+n.desc+")"
			st = append(st, n)
		case opStatus:
			n := pop()
			s := statuses[arg()%len(statuses)]
			auth := s == 401 || s == 403
			m := node{err: &transport.Error{Server: "s", Op: transport.OpDial, HTTPStatus: s, Err: n.err}, hard: n.hard, hardSt: n.hardSt, cfg: n.cfg, cfgSt: n.cfgSt, bare: n.bare || n.err == nil, empty: (n.err == nil || n.empty) && !auth && s != 404, desc: fmt.Sprintf("transport[%d](%s)", s, n.desc)}
			switch {
			case s == 0:
			case auth:
				m.hard, m.cfg, m.bare = false, false, false
			case s == 404: // a dial's 404: the URL is no MCP endpoint
				m.cfgSt = m.cfgSt || m.bare
				m.hard, m.cfg, m.bare = false, false, false
			default:
				m.hardSt, m.cfgSt = m.hardSt || m.hard, m.cfgSt || m.cfg
				m.hard, m.cfg, m.bare = false, false, false
			}
			st = append(st, m)
		case opNetOp:
			n := pop()
			n.err, n.desc, n.empty = &net.OpError{Op: "dial", Net: "tcp", Err: n.err}, "netop("+n.desc+")", false
			n.bare = n.bare || n.err == nil
			st = append(st, n)
		case opSyscall:
			n := pop()
			n.err, n.desc, n.empty = os.NewSyscallError("read", n.err), "syscall("+n.desc+")", false
			st = append(st, n)
			if n.err == nil {
				st[len(st)-1] = node{desc: "nil"} // NewSyscallError(nil) is nil
			}
		case opOpaque:
			n := pop()
			st = append(st, node{err: opaque{n.err}, empty: true, bare: true, desc: "opaque(" + n.desc + ")"})
		case opNilUnwrap:
			st = append(st, node{err: nilUnwrap{}, empty: true, bare: true, desc: "nilunwrap"})
		case opJoin, opMulti:
			k := 1 + arg()%4
			bits := arg()
			kids := make([]node, k)
			for i := k - 1; i >= 0; i-- {
				kids[i] = pop()
			}
			var errs []error
			var descs []string
			var agg node
			empty, forced := true, false
			for i, kid := range kids {
				if op == opMulti && bits&(1<<i) != 0 {
					errs = append(errs, nil)
					descs = append(descs, "nil")
				}
				errs = append(errs, kid.err)
				descs = append(descs, kid.desc)
				agg.or(kid)
				empty = empty && (kid.err == nil || kid.empty)
				forced = forced || kid.err == transport.ErrForcedClose
			}
			var e error
			name := "join"
			if op == opMulti {
				e, name = multi(errs), "multi"
			} else if e = errors.Join(errs...); e == nil {
				st = append(st, node{desc: "nil"})
				continue
			}
			if forced {
				agg, empty = node{bare: true}, false
			}
			agg.err, agg.empty, agg.desc = e, empty, fmt.Sprintf("%s(%v)", name, descs)
			st = append(st, agg)
		case opMultiW:
			b, a := pop(), pop()
			if a.err == nil || b.err == nil {
				st = append(st, a, b)
				continue
			}
			forced := a.err == transport.ErrForcedClose || b.err == transport.ErrForcedClose
			var agg node
			agg.or(a)
			agg.or(b)
			if forced {
				agg = node{bare: true}
			}
			agg.err, agg.empty, agg.desc = fmt.Errorf("%w and %w", a.err, b.err), a.empty && b.empty && !forced, "multiw("+a.desc+", "+b.desc+")"
			st = append(st, agg)
		case opForced:
			n := pop()
			if n.err == nil {
				n.err, n.desc = machine.ErrEffectTimeout, "effect-timeout"
			}
			st = append(st, node{err: fmt.Errorf("%w: %w", transport.ErrForcedClose, n.err), bare: true, desc: "forced(" + n.desc + ")"})
		case opDeep:
			n := pop()
			d := min(16*arg()+1, maxDepth-depth)
			depth += d
			e := n.err
			for range d {
				e = chain{e}
			}
			n.err, n.empty, n.desc = e, n.err == nil || n.empty, fmt.Sprintf("chain%d(%s)", d, n.desc)
			n.bare = n.bare || n.empty
			st = append(st, n)
		}
	}
	if len(st) == 0 {
		st = append(st, node{err: errOpaque, desc: "opaque"})
	}
	return st
}

// seed writes a builder program.
func seed(ops ...int) []byte {
	b := make([]byte, len(ops))
	for i, op := range ops {
		b[i] = byte(op)
	}
	return b
}

func leaf(e error) int { return slices.Index(leaves, e) }

func typedNil(e error) int { return slices.Index(typedNils, e) }

// classifySeeds are known crashers and the shapes real faults produce.
var classifySeeds = [][]byte{
	{},
	// Typed nils: alone, wrapped, joined, under a status.
	seed(opTypedNil, typedNil((*transport.Error)(nil))),
	seed(opTypedNil, typedNil((*jsonrpc.Error)(nil))),
	seed(opTypedNil, typedNil((*net.OpError)(nil))),
	seed(opTypedNil, typedNil((*net.OpError)(nil)), opNetOp), // its Timeout looks inside and panics
	seed(opTypedNil, typedNil((*reasonError)(nil)), opWrap),
	seed(opLeaf, leaf(syscall.ECONNREFUSED), opTypedNil, typedNil((*transport.Error)(nil)), opJoin, 1),
	seed(opTypedNil, typedNil((*exec.ExitError)(nil)), opStatus, 5),
	// Nil kids, no kids.
	seed(opNil, opNil, opMulti, 1, 0),
	seed(opNil, opMulti, 0, 0xff),
	seed(opLeaf, leaf(io.EOF), opNil, opMulti, 1, 0x3),
	seed(opNil, opNil, opJoin, 1),
	seed(opNilUnwrap, opWrap),
	// Deep nesting, and a join at the bottom of a deep chain.
	seed(opLeaf, leaf(syscall.ECONNREFUSED), opDeep, 255, opDeep, 255, opDeep, 255),
	seed(opLeaf, leaf(io.EOF), opLeaf, leaf(mcp.ErrSessionMissing), opJoin, 1, opDeep, 200, opStatus, 9),
	// Forced closes: our own deadline, Close, joined with real trouble.
	seed(opLeaf, leaf(machine.ErrEffectTimeout), opForced, opLeaf, leaf(syscall.ECONNREFUSED), opJoin, 1),
	seed(opLeaf, leaf(machine.ErrClosed), opForced, opLeaf, leaf(io.EOF), opJoin, 1, opStatus, 1),
	seed(opLeaf, leaf(transport.ErrForcedClose), opLeaf, leaf(syscall.ECONNREFUSED), opJoin, 1),
	seed(opLeaf, leaf(transport.ErrForcedClose), opWrap, opLeaf, leaf(mcp.ErrSessionMissing), opMultiW),
	// The SDK's rejected (-32005) under each status, and the closing codes.
	seed(opCode, 2, opStatus, 5), seed(opCode, 2, opStatus, 9), seed(opCode, 2, opStatus, 8),
	seed(opCode, 2, opStatus, 4), seed(opCode, 2), seed(opCode, 0, opCode, 1, opJoin, 1),
	seed(opCode, 200, opStatus, 6, opLeaf, leaf(machine.ErrClosed), opJoin, 1),
	// Cleanup noise joined with real failures, in both orders; canceled and closed.
	seed(opLeaf, leaf(machine.ErrClosed), opLeaf, leaf(mcp.ErrConnectionClosed), opJoin, 1),
	seed(opLeaf, leaf(context.Canceled), opLeaf, leaf(machine.ErrClosed), opJoin, 1),
	seed(opLeaf, leaf(io.EOF), opNetOp, opLeaf, leaf(netTimeout{timeout: true}), opNetOp, opJoin, 1),
	seed(opErrno, int(syscall.EACCES), opSyscall, opLeaf, leaf(&json.SyntaxError{Offset: 3}), opMultiW),
	seed(opLeaf, leaf(errOpaque), opOpaque, opLeaf, leaf(syscall.ETIMEDOUT), opOpaque, opJoin, 1),
}

// TestClassifyNothingInside pins the fuzz rules' crashers on their own: typed nils
// and multi-errors of nil kids are classified as an opaque error is, and never panic.
func TestClassifyNothingInside(t *testing.T) {
	for _, err := range []error{
		(*transport.Error)(nil), (*jsonrpc.Error)(nil), (*net.OpError)(nil),
		multi{nil}, multi{nil, nil}, multi{}, errors.Join(multi{nil}),
		&transport.Error{Err: (*jsonrpc.Error)(nil), HTTPStatus: 503},
		&net.OpError{Op: "read", Err: (*net.OpError)(nil)},
	} {
		for _, own := range []bool{false, true} {
			if got, want := Classify(err, own), Classify(errOpaque, own); got != want {
				t.Errorf("Classify(%#v, %v) = %s, want %s", err, own, got, want)
			}
		}
	}
}
