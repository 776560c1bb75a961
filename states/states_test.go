package states

import "testing"

func TestNamesRoundTrip(t *testing.T) {
	for _, s := range AllStates() {
		if got, ok := ParseState(s.String()); !ok || got != s {
			t.Errorf("ParseState(%q) = %v, %v", s, got, ok)
		}
	}
	for _, tr := range AllTriggers() {
		if got, ok := ParseTrigger(tr.String()); !ok || got != tr {
			t.Errorf("ParseTrigger(%q) = %v, %v", tr, got, ok)
		}
	}
	if len(AllStates()) != 11 || len(AllTriggers()) != 10 || len(AllCauses()) != 9 {
		t.Errorf("vocabulary sizes: %d states, %d triggers, %d causes", len(AllStates()), len(AllTriggers()), len(AllCauses()))
	}
	if _, ok := ParseState("Ready"); ok {
		t.Error("names are case-sensitive")
	}
	if got := State(200).String(); got != "state(200)" {
		t.Errorf("unknown state renders as %q", got)
	}
	if got := Trigger(64).String(); got != "trigger(64)" {
		t.Errorf("unknown trigger renders as %q", got)
	}
}

func TestCauseCounts(t *testing.T) {
	counting := map[Cause]bool{CauseLost: true, CauseTimeout: true, CauseExpired: true}
	for _, c := range AllCauses() {
		if c.Counts() != counting[c] {
			t.Errorf("%s.Counts() = %v", c, c.Counts())
		}
	}
}

func TestSessionStates(t *testing.T) {
	for _, s := range AllStates() {
		if s.HasSession() != (s == Ready || s == Probing || s == Replacing || s == Retiring) || s.Final() != (s == Closed) {
			t.Errorf("%s: HasSession %v, Final %v", s, s.HasSession(), s.Final())
		}
	}
}
