package faults

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/states"
)

var update = flag.Bool("update", false, "rewrite the matrix section of ../docs/reliability.md with this run's table")

// docPath is the page the table is published on, from this package's
// directory (where go test runs its tests).
const docPath = "../docs/reliability.md"

const (
	beginMarker = "<!-- matrix:begin -->"
	endMarker   = "<!-- matrix:end -->"
)

// A result is what one row measured, as the table shows it.
type result struct {
	fault, kind                                string
	path, detect, recover, calls, leaks, notes string
	failed                                     bool
}

var results struct {
	sync.Mutex
	m map[string]result
}

// record keeps the row's result for the table.
func record(r *run, leaks []string) {
	res := result{fault: r.row.fault, kind: r.row.kind, path: r.path(), calls: r.callsCell(), detect: "—", recover: "—", leaks: "none"}
	if len(leaks) > 0 {
		res.leaks = strings.Join(leaks, "; ")
	}
	det := r.detection()
	switch {
	case r.row.planned:
		res.detect = "planned"
	case r.row.detect == nil && det == nil:
		res.detect = "none (tolerated)"
	case det != nil:
		res.detect = fmt.Sprintf("%s (%s)", duration(det.At.Sub(r.start)), det.Cause)
	}
	if rec, ok := r.recovery(); ok && (r.row.planned || r.row.detect != nil) {
		from := det.At
		if r.end.After(from) {
			from = r.end
		}
		res.recover = duration(rec.At.Sub(from))
	}
	r.mu.Lock()
	notes := slices.Clone(r.notes)
	failures := slices.Clone(r.failures)
	r.mu.Unlock()
	res.failed = r.t.Failed() || len(failures) > 0
	verdict := "pass"
	if res.failed {
		verdict = "**FAIL**"
		if len(failures) > 0 {
			first, _, _ := strings.Cut(failures[0], "\n")
			verdict += ": " + first
		}
	}
	res.notes = strings.Join(append([]string{verdict}, notes...), "; ")
	results.Lock()
	if results.m == nil {
		results.m = map[string]result{}
	}
	results.m[r.id] = res
	results.Unlock()
}

// duration renders a measured time: milliseconds under a second, else seconds.
func duration(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// path returns the states the connection went through, from the one it was in
// when the fault began to the one it recovered in (or to the end of the fault,
// for a fault that must be tolerated), with repeats folded.
func (r *run) path() string {
	trs := r.transitions()
	if r.start.IsZero() || len(trs) == 0 {
		return "—"
	}
	last := r.end
	if rec, ok := r.recovery(); ok {
		last = rec.At
	}
	var seq []string
	for _, tr := range trs {
		if tr.At.Before(r.start) {
			continue
		}
		if tr.At.After(last) {
			break
		}
		if len(seq) == 0 {
			seq = append(seq, tr.From.String())
		}
		if tr.To != tr.From {
			seq = append(seq, tr.To.String())
		}
	}
	if len(seq) == 0 {
		return r.conn.State().String()
	}
	return fold(seq)
}

// fold writes a sequence of states with its repeats folded:
// a b c b c b c d → a→(b→c)×3→d. At each point it folds the block (of up to 4
// states) whose repeats cover the most.
func fold(seq []string) string {
	var parts []string
	for i := 0; i < len(seq); {
		bestLen, bestN := 1, 1
		for l := 1; l <= 4 && i+2*l <= len(seq); l++ {
			n := 1
			for i+(n+1)*l <= len(seq) && slices.Equal(seq[i:i+l], seq[i+n*l:i+(n+1)*l]) {
				n++
			}
			if n > 1 && n*l > bestN*bestLen {
				bestLen, bestN = l, n
			}
		}
		if bestN == 1 {
			parts = append(parts, seq[i])
			i++
			continue
		}
		parts = append(parts, fmt.Sprintf("(%s)×%d", strings.Join(seq[i:i+bestLen], "→"), bestN))
		i += bestLen * bestN
	}
	return strings.Join(parts, "→")
}

// renderMatrix renders the matrix section of the page from this run.
func renderMatrix(all []*row, took time.Duration, before, after baseline) string {
	var b bytes.Buffer
	pol := policies()
	race := "off"
	if raceEnabled {
		race = "on"
	}
	fmt.Fprintf(&b, "Measured by `go test -race -count=1 ./faults -run TestMatrix -update` on %s: %s %s/%s, GOMAXPROCS %d, race detector %s, rows %d at a time. The %d rows took %s in all.\n\n",
		time.Now().UTC().Format("2006-01-02"), runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), race,
		parallelism(), len(all), duration(took.Round(10*time.Millisecond)))
	fmt.Fprintf(&b, "Policies: keepalive %v, probe timeout %v, connect timeout %v, teardown timeout %v, backoff %v..%v, breaker after %d failures, cooldown %v..%v. Calls: one every %v, each with a %v deadline.\n\n",
		pol.KeepaliveInterval, pol.ProbeTimeout, pol.ConnectTimeout, pol.TeardownTimeout, pol.BackoffBase, pol.BackoffMax,
		pol.BreakerThreshold, pol.BreakerCooldown, pol.BreakerCooldownMax, callLoadEvery, callTimeout)
	b.WriteString("| fault | transport | state path | detect | recover | calls answered / lost | leaks | result |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	results.Lock()
	for _, w := range all {
		res, ok := results.m[w.id()]
		if !ok {
			fmt.Fprintf(&b, "| %s | %s | not run | | | | | **FAIL**: not run |\n", w.fault, w.kind)
			continue
		}
		cells := []string{res.fault, res.kind, res.path, res.detect, res.recover, res.calls, res.leaks, res.notes}
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	results.Unlock()
	fmt.Fprintf(&b, "\nThe whole test process, before the rows and after them: %d → %d goroutines, %d → %d open file descriptors, %d → %d child processes.\n",
		before.goroutines, after.goroutines, before.fds, after.fds, before.children, after.children)
	return b.String()
}

// parallelism returns how many rows run at once.
func parallelism() int {
	if f := flag.Lookup("test.parallel"); f != nil {
		var n int
		if _, err := fmt.Sscan(f.Value.String(), &n); err == nil {
			return n
		}
	}
	return runtime.GOMAXPROCS(0)
}

// publish replaces the matrix section of the page.
func publish(section string) error {
	data, err := os.ReadFile(docPath)
	if err != nil {
		return err
	}
	page := string(data)
	i, j := strings.Index(page, beginMarker), strings.Index(page, endMarker)
	if i < 0 || j < i {
		return fmt.Errorf("%s lacks the markers %s and %s", docPath, beginMarker, endMarker)
	}
	page = page[:i+len(beginMarker)] + "\n" + section + page[j:]
	return os.WriteFile(docPath, []byte(page), 0o644)
}

// publishedRows returns the fault/transport of each row of the published
// table, and the results that are not a pass.
func publishedRows() (ids, failing []string, err error) {
	data, err := os.ReadFile(docPath)
	if err != nil {
		return nil, nil, err
	}
	page := string(data)
	i, j := strings.Index(page, beginMarker), strings.Index(page, endMarker)
	if i < 0 || j < i {
		return nil, nil, fmt.Errorf("%s lacks the markers %s and %s", docPath, beginMarker, endMarker)
	}
	for _, line := range strings.Split(page[i:j], "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| fault ") || strings.HasPrefix(line, "| ---") {
			continue
		}
		cells := strings.Split(line, " | ")
		if len(cells) < 8 {
			continue
		}
		id := strings.TrimPrefix(cells[0], "| ") + "/" + cells[1]
		ids = append(ids, id)
		if !strings.HasPrefix(cells[len(cells)-1], "pass") {
			failing = append(failing, id+": "+cells[len(cells)-1])
		}
	}
	return ids, failing, nil
}

// TestFold pins how paths are folded.
func TestFold(t *testing.T) {
	s := func(names ...states.State) []string {
		var out []string
		for _, n := range names {
			out = append(out, n.String())
		}
		return out
	}
	for _, c := range []struct {
		seq  []string
		want string
	}{
		{s(states.Ready), "ready"},
		{s(states.Ready, states.TearingDown, states.BackingOff, states.Connecting, states.Ready), "ready→tearing-down→backing-off→connecting→ready"},
		{s(states.Ready, states.Probing, states.Ready, states.Probing, states.Ready), "(ready→probing)×2→ready"},
		{s(states.Probing, states.TearingDown, states.BackingOff, states.Connecting, states.BackingOff, states.Connecting, states.BackingOff, states.Connecting, states.Ready),
			"probing→tearing-down→(backing-off→connecting)×3→ready"},
		{s(states.BreakerOpen, states.HalfOpen, states.BreakerOpen, states.HalfOpen, states.Ready), "(breaker-open→half-open)×2→ready"},
	} {
		if got := fold(c.seq); got != c.want {
			t.Errorf("fold(%v) = %s, want %s", c.seq, got, c.want)
		}
	}
}
