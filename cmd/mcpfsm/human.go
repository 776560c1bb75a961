package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/mcpfsm/mcpfsm/machine"
)

// maxLine is how much of one line of outside text (a server's error, say) the human
// output shows, in characters.
const maxLine = 400

// printable makes text that came from outside (a server's error message, a file's
// name) safe to print on one line for a person: control characters, invisible format
// characters and invalid UTF-8 are escaped Go-style (\x1b, \n, \u202e), so that no
// escape sequence reaches the terminal and no newline forges a line of output; text
// longer than max characters is cut, with "…". Every human output of the commands
// that shows such text goes through it (JSON output is escaped by encoding/json).
func printable(s string, max int) string {
	var b strings.Builder
	n := 0
	for i, w := 0, 0; i < len(s); i += w {
		if n == max {
			b.WriteString("…")
			break
		}
		n++
		var r rune
		r, w = utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && w == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == ' ' || unicode.IsGraphic(r):
			b.WriteRune(r)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	return b.String()
}

// errorText renders an error for people. The errors of errors.Join are put one a line;
// the problems of a spec or config (a *machine.FileError, whose messages are the
// loaders' own and quote what they show of the file) one a line too; any other error,
// which may carry a server's text, is made printable on one line.
func errorText(err error) string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		texts := make([]string, len(errs))
		for i, e := range errs {
			texts[i] = e.Error()
		}
		// Only a join is its errors' texts one a line (fmt.Errorf with two %w is not).
		if strings.Join(texts, "\n") == err.Error() {
			for i, e := range errs {
				texts[i] = errorText(e)
			}
			return strings.Join(texts, "\n")
		}
	}
	if fe := (*machine.FileError)(nil); errors.As(err, &fe) {
		lines := strings.Split(err.Error(), "\n")
		for i, l := range lines {
			lines[i] = printable(l, maxLine)
		}
		return strings.Join(lines, "\n")
	}
	return printable(err.Error(), maxLine)
}

// failureRecord is the message of the log record of a failure that counts; the
// transition line (run) or the error (call) already says it, with its reason.
const failureRecord = "mcpfsm: connection failure"

// withoutFailures is a log handler that drops the records of failures that count, so
// that each failure is printed once.
type withoutFailures struct{ slog.Handler }

func (h withoutFailures) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == failureRecord {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h withoutFailures) WithAttrs(attrs []slog.Attr) slog.Handler {
	return withoutFailures{h.Handler.WithAttrs(attrs)}
}

func (h withoutFailures) WithGroup(name string) slog.Handler {
	return withoutFailures{h.Handler.WithGroup(name)}
}

// count says n of noun: "1 server", "2 servers".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
