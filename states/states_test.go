package states

import "testing"

func TestNamesRoundTrip(t *testing.T) {
	for _, tr := range AllTriggers() {
		if got, ok := ParseTrigger(tr.String()); !ok || got != tr {
			t.Errorf("ParseTrigger(%q) = %v, %v", tr, got, ok)
		}
	}
	for _, c := range AllCauses() {
		if got, ok := ParseCause(c.String()); !ok || got != c {
			t.Errorf("ParseCause(%q) = %v, %v", c, got, ok)
		}
	}
	if len(AllTriggers()) != 12 || len(AllCauses()) != 11 {
		t.Errorf("vocabulary sizes: %d triggers, %d causes", len(AllTriggers()), len(AllCauses()))
	}
	if _, ok := ParseTrigger("Close"); ok {
		t.Error("names are case-sensitive")
	}
	if got := Trigger(64).String(); got != "trigger(64)" {
		t.Errorf("unknown trigger renders as %q", got)
	}
	if got := Cause(200).String(); got != "cause(200)" {
		t.Errorf("unknown cause renders as %q", got)
	}
}

func TestCauseCounts(t *testing.T) {
	counting := map[Cause]bool{CauseLost: true, CauseTimeout: true, CauseExpired: true, CauseProtocol: true}
	notFailures := map[Cause]bool{CauseNone: true, CauseArtifact: true, CauseCanceled: true, CauseRequest: true}
	for _, c := range AllCauses() {
		if c.Counts() != counting[c] {
			t.Errorf("%s.Counts() = %v", c, c.Counts())
		}
		if c.Failure() == notFailures[c] {
			t.Errorf("%s.Failure() = %v", c, c.Failure())
		}
	}
}
