package machine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"
)

// MaxSpecSize is the largest spec or config file the loaders read, in bytes.
const MaxSpecSize = 1 << 20

// ReadFile reads a spec or config file for the loaders: a regular file, of which at
// most MaxSpecSize+1 bytes are read (one past the limit, so that Parse can say the file
// is too large). A FIFO, a device or a directory is refused before anything is read, so
// that /dev/zero cannot grow memory and a FIFO cannot hang the caller. Its errors are
// *os.PathError.
func ReadFile(path string) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO swapped in after the check below must not wait for a
	// writer. It changes nothing for a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, &os.PathError{Op: "read", Path: path, Err: errNotRegular}
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSpecSize+1))
	if err != nil {
		return nil, err
	}
	return data, nil
}

var errNotRegular = errors.New("not a regular file")

// maxQuoted is how much of a text from a file a message quotes, in characters.
const maxQuoted = 60

// Quote returns s quoted as Go quotes a string (control characters escaped), cut to 60
// characters with "…" when longer, for quoting text from a file in a message: a
// message says which text is wrong without dumping a whole file.
func Quote(s string) string {
	n := 0
	for i := range s {
		if n == maxQuoted {
			return strconv.Quote(strings.ToValidUTF8(s[:i], "\ufffd") + "…")
		}
		n++
	}
	return strconv.Quote(s)
}

// A Problem is one thing wrong with a YAML file, at a place in it.
type Problem struct {
	File   string // the file's name, as given to the reader
	Line   int    // 1-based; 0 when the problem is with the file as a whole
	Column int
	Msg    string
}

// String is FILE:LINE:COLUMN: MSG, or FILE: MSG for the file as a whole.
func (p Problem) String() string {
	if p.Line == 0 {
		return p.File + ": " + p.Msg
	}
	return fmt.Sprintf("%s:%d:%d: %s", p.File, p.Line, p.Column, p.Msg)
}

// A FileError lists every problem found in a file, in the order they occur in it.
type FileError struct {
	File     string    // the file's name
	Problems []Problem // every problem found, in file order
}

// Error is every problem's String, one a line.
func (e *FileError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// ErrInvalid is matched by every *FileError, for errors.Is.
var ErrInvalid = errors.New("invalid file")

// Is reports whether target is ErrInvalid.
func (e *FileError) Is(target error) bool { return target == ErrInvalid }

// A YAMLReader walks a YAML document strictly and collects problems with their
// positions rather than stopping at the first. It refuses anchors, aliases, merge keys
// and tags, which a lifecycle or config never needs and which hide what a file says.
// The spec loader uses it, and so does the servers config loader.
type YAMLReader struct {
	File     string // the file's name, as problems report it
	problems []Problem
}

// Errorf records a problem at n's position (or the file's, when n is nil).
func (r *YAMLReader) Errorf(n *yaml.Node, format string, args ...any) {
	p := Problem{File: r.File, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		p.Line, p.Column = n.Line, n.Column
	}
	r.problems = append(r.problems, p)
}

// Err returns the problems recorded so far as a *FileError, or nil.
func (r *YAMLReader) Err() error {
	if len(r.problems) == 0 {
		return nil
	}
	ps := append([]Problem(nil), r.problems...)
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].Line != ps[j].Line {
			return ps[i].Line < ps[j].Line
		}
		return ps[i].Column < ps[j].Column
	})
	// The same problem found twice (a name checked in two passes) is reported once.
	out := ps[:0]
	for i, p := range ps {
		if i > 0 && p == ps[i-1] {
			continue
		}
		out = append(out, p)
	}
	return &FileError{File: r.File, Problems: out}
}

// Parse reads data as one YAML document and returns its root mapping, or nil after
// recording why it cannot. It never panics, whatever data holds.
func (r *YAMLReader) Parse(data []byte) (root *yaml.Node) {
	if len(data) > MaxSpecSize {
		r.Errorf(nil, "file is larger than %d bytes", MaxSpecSize)
		return nil
	}
	var doc yaml.Node
	var extra *yaml.Node // the start of a second document that says something
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("the YAML parser failed on this input: %v", p)
			}
		}()
		dec := yaml.NewDecoder(bytes.NewReader(data))
		if err := dec.Decode(&doc); err != nil && err != io.EOF {
			return err
		}
		// A second document would be dropped unread: it is refused below. Empty
		// ones (a trailing ---) say nothing.
		for extra == nil {
			var next yaml.Node
			switch err := dec.Decode(&next); {
			case err == io.EOF:
				return nil
			case err != nil:
				return err
			case len(next.Content) > 0 && !emptyScalar(next.Content[0]):
				extra = next.Content[0]
			}
		}
		return nil
	}()
	if err != nil {
		line := 0
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if _, e := fmt.Sscanf(msg, "line %d:", &line); e == nil {
			msg = strings.TrimSpace(msg[strings.Index(msg, ":")+1:])
		}
		col := 1
		if line == 0 && (strings.Contains(msg, "control characters") || strings.Contains(msg, "UTF-8")) {
			// The parser names no place for a character it refuses (a control
			// character, a byte that is not UTF-8): find it.
			var found string
			if line, col, found = badChar(data); line > 0 {
				msg += " (found " + found + ")"
			}
		}
		r.problems = append(r.problems, Problem{File: r.File, Line: line, Column: col, Msg: "not valid YAML: " + msg})
		return nil
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		r.Errorf(nil, "file is empty")
		return nil
	}
	if extra != nil {
		r.Errorf(extra, "a second YAML document: a file holds one (what follows its --- would be ignored)")
		return nil
	}
	if !r.plain(doc.Content[0]) {
		return nil
	}
	if doc.Content[0].Kind != yaml.MappingNode {
		r.Errorf(doc.Content[0], "expected a mapping at the top of the file, found %s", describe(doc.Content[0]))
		return nil
	}
	return doc.Content[0]
}

// badChar returns the line and column (in characters, from 1) of the first character
// of data that YAML does not allow: a byte that is not UTF-8, or a control character
// other than tab, line feed, carriage return and next line; and that character, quoted.
// It returns 0 for the line if there is none.
func badChar(data []byte) (line, col int, found string) {
	line, col = 1, 1
	for i := 0; i < len(data); {
		r, w := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && w <= 1:
			return line, col, strconv.Quote(string(data[i : i+1]))
		case r < 0x20 && r != '\t' && r != '\n' && r != '\r', r >= 0x7f && r < 0xa0 && r != 0x85, r == 0xfffe, r == 0xffff:
			return line, col, strconv.Quote(string(r))
		case r == '\n':
			line, col = line+1, 1
		default:
			col++
		}
		i += w
	}
	return 0, 0, ""
}

// emptyScalar reports whether n is the null of a document that says nothing.
func emptyScalar(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null" && n.Value == ""
}

// plain reports whether the tree under n is free of anchors, aliases, merge keys and
// tags, recording a problem for each one found.
func (r *YAMLReader) plain(n *yaml.Node) bool {
	ok := true
	var walk func(n *yaml.Node, depth int)
	walk = func(n *yaml.Node, depth int) {
		if depth > 64 {
			r.Errorf(n, "nested more than 64 levels deep")
			ok = false
			return
		}
		switch {
		case n.Kind == yaml.AliasNode:
			r.Errorf(n, "YAML aliases (*%s) are not supported: write the value out", n.Value)
			ok = false
			return
		case n.Anchor != "":
			r.Errorf(n, "YAML anchors (&%s) are not supported: write each value out", n.Anchor)
			ok = false
		case n.Tag == "!!merge" || (n.Kind == yaml.ScalarNode && n.Value == "<<" && n.Style == 0):
			r.Errorf(n, "YAML merge keys (<<) are not supported: write each key out")
			ok = false
		case n.Style&yaml.TaggedStyle != 0:
			r.Errorf(n, "YAML tags (%s) are not supported: quote a value that starts with !", n.Tag)
			ok = false
		}
		for _, c := range n.Content {
			walk(c, depth+1)
		}
	}
	walk(n, 0)
	return ok
}

// A Field is one key and value of a mapping.
type Field struct {
	Key   *yaml.Node // the key, a scalar
	Value *yaml.Node // its value; nil when the key is absent
}

// Name returns the field's key.
func (f Field) Name() string { return f.Key.Value }

// Mapping returns n's fields in order, recording a problem if n is not a mapping, a
// key is not a plain string, or a key repeats. what names n in messages.
func (r *YAMLReader) Mapping(n *yaml.Node, what string) []Field {
	if n.Kind != yaml.MappingNode {
		r.Errorf(n, "%s must be a mapping, found %s", what, describe(n))
		return nil
	}
	seen := make(map[string]bool, len(n.Content)/2)
	out := make([]Field, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			r.Errorf(k, "a key in %s must be a name, found %s", what, describe(k))
			continue
		}
		if seen[k.Value] {
			r.Errorf(k, "duplicate key %s in %s", Quote(k.Value), what)
			continue
		}
		seen[k.Value] = true
		out = append(out, Field{k, v})
	}
	return out
}

// Struct is Mapping for a mapping with a fixed set of keys: it records unknown keys
// (with a "did you mean") and missing required ones, and returns the fields by key.
// A key written as "name!" in keys is required.
func (r *YAMLReader) Struct(n *yaml.Node, what string, keys ...string) map[string]Field {
	fields := r.Mapping(n, what)
	if fields == nil && n.Kind != yaml.MappingNode {
		return nil
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = strings.TrimSuffix(k, "!")
	}
	out := make(map[string]Field, len(fields))
	for _, f := range fields {
		known := false
		for _, k := range names {
			known = known || k == f.Name()
		}
		if !known {
			r.Errorf(f.Key, "unknown key %s in %s%s", Quote(f.Name()), what, didYouMean(f.Name(), names))
			continue
		}
		out[f.Name()] = f
	}
	for _, k := range keys {
		if name, required := strings.CutSuffix(k, "!"); required && out[name].Key == nil {
			r.Errorf(n, "%s has no %q", what, name)
		}
	}
	return out
}

// String returns n's value if n is a non-empty scalar, recording a problem otherwise.
func (r *YAMLReader) String(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		r.Errorf(n, "%s must be a single value, found %s", what, describe(n))
		return "", false
	}
	if strings.TrimSpace(n.Value) == "" {
		r.Errorf(n, "%s is empty", what)
		return "", false
	}
	return n.Value, true
}

// Strings accepts a single value or a list of them.
func (r *YAMLReader) Strings(n *yaml.Node, what string) []*yaml.Node {
	if n.Kind == yaml.ScalarNode {
		if _, ok := r.String(n, what); ok {
			return []*yaml.Node{n}
		}
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		r.Errorf(n, "%s must be a name or a list of names, found %s", what, describe(n))
		return nil
	}
	var out []*yaml.Node
	for _, c := range n.Content {
		if _, ok := r.String(c, what); ok {
			out = append(out, c)
		}
	}
	return out
}

// Bool returns n's value if it is true or false.
func (r *YAMLReader) Bool(n *yaml.Node, what string) (bool, bool) {
	if n.Kind == yaml.ScalarNode && (n.Value == "true" || n.Value == "false") {
		return n.Value == "true", true
	}
	r.Errorf(n, "%s must be true or false, found %s", what, describe(n))
	return false, false
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return Quote(n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}
