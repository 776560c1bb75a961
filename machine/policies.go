package machine

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Policies are the tunable numbers of a lifecycle. A spec's policies section gives each
// its default; a connection may override any of them. The tag of each field is its name
// in YAML and the kind of value it takes:
//
//   - duration: a Go duration with its unit ("30s", "2m"), greater than zero;
//     a duration marked zero may also be 0, which disables what it times.
//   - count: a whole number of at least 1.
//   - factor: a number of at least 1.
//   - fraction: a number from 0 to 1.
type Policies struct {
	ConnectTimeout  time.Duration `policy:"connect_timeout,duration"`
	ProbeTimeout    time.Duration `policy:"probe_timeout,duration"`
	TeardownTimeout time.Duration `policy:"teardown_timeout,duration"`
	DrainTimeout    time.Duration `policy:"drain_timeout,duration"`

	KeepaliveInterval time.Duration `policy:"keepalive_interval,duration,zero"`
	KeepaliveJitter   float64       `policy:"keepalive_jitter,fraction"`
	MaxSessionAge     time.Duration `policy:"max_session_age,duration,zero"`

	BackoffBase       time.Duration `policy:"backoff_base,duration"`
	BackoffMultiplier float64       `policy:"backoff_multiplier,factor"`
	BackoffJitter     float64       `policy:"backoff_jitter,fraction"`
	BackoffMax        time.Duration `policy:"backoff_max,duration"`

	BreakerThreshold          int           `policy:"breaker_threshold,count"`
	BreakerCooldown           time.Duration `policy:"breaker_cooldown,duration"`
	BreakerCooldownMultiplier float64       `policy:"breaker_cooldown_multiplier,factor"`
	BreakerCooldownJitter     float64       `policy:"breaker_cooldown_jitter,fraction"`
	BreakerCooldownMax        time.Duration `policy:"breaker_cooldown_max,duration"`

	ParkInterval        time.Duration `policy:"park_interval,duration"`
	AuthRecheckInterval time.Duration `policy:"auth_recheck_interval,duration,zero"`
}

// A PolicyKind is the kind of value a policy takes.
type PolicyKind uint8

// The kinds of policy.
const (
	KindDuration PolicyKind = iota + 1
	KindCount
	KindFactor
	KindFraction
)

// String names the kind as the policy table does: duration, count, factor or fraction.
func (k PolicyKind) String() string {
	switch k {
	case KindDuration:
		return "duration"
	case KindCount:
		return "count"
	case KindFactor:
		return "factor"
	case KindFraction:
		return "fraction"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// PolicyInfo describes one field of Policies.
type PolicyInfo struct {
	Name      string     // as in YAML, such as "connect_timeout"
	Kind      PolicyKind // what values it takes
	ZeroIsOff bool       // a duration that may be 0, meaning disabled
	field     int
}

// policyTable lists the fields of Policies in declaration order; it is built once from
// the struct tags, so adding a field with a tag is all it takes to add a policy.
var policyTable = func() []PolicyInfo {
	t := reflect.TypeFor[Policies]()
	out := make([]PolicyInfo, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		parts := strings.Split(f.Tag.Get("policy"), ",")
		info := PolicyInfo{Name: parts[0], field: i}
		for _, p := range parts[1:] {
			switch p {
			case "duration":
				info.Kind = KindDuration
			case "count":
				info.Kind = KindCount
			case "factor":
				info.Kind = KindFactor
			case "fraction":
				info.Kind = KindFraction
			case "zero":
				info.ZeroIsOff = true
			default:
				panic("machine: bad policy tag on " + f.Name)
			}
		}
		out = append(out, info)
	}
	return out
}()

// AllPolicies describes every policy, in the order of the Policies struct.
func AllPolicies() []PolicyInfo { return append([]PolicyInfo(nil), policyTable...) }

// LookupPolicy returns the policy with the given YAML name.
func LookupPolicy(name string) (PolicyInfo, bool) {
	for _, p := range policyTable {
		if p.Name == name {
			return p, true
		}
	}
	return PolicyInfo{}, false
}

func policyNames() []string {
	out := make([]string, len(policyTable))
	for i, p := range policyTable {
		out[i] = p.Name
	}
	return out
}

// Duration returns the value of a duration policy named at run time, such as a delay
// that a spec declares by policy name.
func (p *Policies) Duration(info PolicyInfo) time.Duration {
	return time.Duration(reflect.ValueOf(p).Elem().Field(info.field).Int())
}

// durationTable returns every policy's value as a duration, indexed like policyTable,
// so that the owner loop reads a policy named in the spec without reflection.
func (p *Policies) durationTable() []time.Duration {
	v := reflect.ValueOf(p).Elem()
	out := make([]time.Duration, len(policyTable))
	for i, info := range policyTable {
		if info.Kind == KindDuration {
			out[i] = time.Duration(v.Field(info.field).Int())
		}
	}
	return out
}

// Format returns the policy's value as it would be written in YAML.
func (p *Policies) Format(info PolicyInfo) string {
	v := reflect.ValueOf(p).Elem().Field(info.field)
	switch info.Kind {
	case KindDuration:
		return formatDuration(time.Duration(v.Int()))
	case KindCount:
		return strconv.FormatInt(v.Int(), 10)
	default:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	}
}

// Set parses text as a value of the named policy and stores it. The error says what is
// wrong with the value, without position: callers add the file, line and column.
func (p *Policies) Set(name, text string) error {
	info, ok := LookupPolicy(name)
	if !ok {
		return fmt.Errorf("unknown policy %s%s", Quote(name), didYouMean(name, policyNames()))
	}
	f := reflect.ValueOf(p).Elem().Field(info.field)
	switch info.Kind {
	case KindDuration:
		d, err := parseDuration(text)
		if err != nil {
			return fmt.Errorf("policy %s: %v", name, err)
		}
		if d > maxPolicyDuration {
			return fmt.Errorf("policy %s: duration %s is longer than %s (100 years), the longest a policy takes", name, formatDuration(d), formatDuration(maxPolicyDuration))
		}
		if d < 0 || (d == 0 && !info.ZeroIsOff) {
			if info.ZeroIsOff {
				return fmt.Errorf("policy %s: duration %s is negative (0 disables it)", name, formatDuration(d))
			}
			return fmt.Errorf("policy %s: duration %s is not positive", name, formatDuration(d))
		}
		f.SetInt(int64(d))
	case KindCount:
		n, err := strconv.ParseInt(text, 10, 32)
		if err != nil {
			return fmt.Errorf("policy %s: %s is not a whole number", name, Quote(text))
		}
		if n < 1 {
			return fmt.Errorf("policy %s: count %d is less than 1", name, n)
		}
		f.SetInt(n)
	case KindFactor, KindFraction:
		x, err := strconv.ParseFloat(text, 64)
		if err != nil || x != x {
			return fmt.Errorf("policy %s: %s is not a number", name, Quote(text))
		}
		if info.Kind == KindFactor && !(x >= 1 && x <= 1e6) {
			return fmt.Errorf("policy %s: factor %s is not between 1 and 1000000", name, Quote(text))
		}
		if info.Kind == KindFraction && !(x >= 0 && x <= 1) {
			return fmt.Errorf("policy %s: fraction %s is not between 0 and 1", name, Quote(text))
		}
		f.SetFloat(x)
	}
	return nil
}

// Validate reports every value out of its range (as Set would refuse it) and every
// relation between values that is broken (a maximum below its base), or nil. Policies
// built in Go must pass it before a machine adopts them: the zero Policies does not.
func (p Policies) Validate() error {
	v := reflect.ValueOf(&p).Elem()
	var problems []string
	for _, info := range policyTable {
		f := v.Field(info.field)
		switch info.Kind {
		case KindDuration:
			d := time.Duration(f.Int())
			switch {
			case d < 0:
				problems = append(problems, fmt.Sprintf("%s %s is negative", info.Name, d))
			case d == 0 && !info.ZeroIsOff:
				problems = append(problems, fmt.Sprintf("%s is 0 (unset?): it must be positive", info.Name))
			case d > maxPolicyDuration:
				problems = append(problems, fmt.Sprintf("%s %s is longer than %s (100 years), the longest a policy takes", info.Name, d, maxPolicyDuration))
			}
		case KindCount:
			if n := f.Int(); n < 1 {
				problems = append(problems, fmt.Sprintf("%s %d is less than 1", info.Name, n))
			}
		case KindFactor:
			if x := f.Float(); !(x >= 1 && x <= 1e6) {
				problems = append(problems, fmt.Sprintf("%s %g is not between 1 and 1000000", info.Name, x))
			}
		case KindFraction:
			if x := f.Float(); !(x >= 0 && x <= 1) {
				problems = append(problems, fmt.Sprintf("%s %g is not between 0 and 1", info.Name, x))
			}
		}
	}
	for _, c := range p.check() {
		problems = append(problems, c[1])
	}
	if len(problems) == 0 {
		return nil
	}
	return &PolicyError{Problems: problems}
}

// A PolicyError lists what is wrong with a set of policies.
type PolicyError struct {
	Problems []string // each "policy: what is wrong"
}

// Error lists the problems on one line, separated by semicolons.
func (e *PolicyError) Error() string { return "invalid policies: " + strings.Join(e.Problems, "; ") }

// check reports relations between policies that no single value can break, as
// (policy name, message) pairs.
func (p *Policies) check() [][2]string {
	var out [][2]string
	if p.BackoffMax < p.BackoffBase {
		out = append(out, [2]string{"backoff_max", fmt.Sprintf("backoff_max %s is less than backoff_base %s", formatDuration(p.BackoffMax), formatDuration(p.BackoffBase))})
	}
	if p.BreakerCooldownMax < p.BreakerCooldown {
		out = append(out, [2]string{"breaker_cooldown_max", fmt.Sprintf("breaker_cooldown_max %s is less than breaker_cooldown %s", formatDuration(p.BreakerCooldownMax), formatDuration(p.BreakerCooldown))})
	}
	return out
}

// maxPolicyDuration is the longest duration a policy takes: 100 years. A time
// that far ahead is still one a clock can hold (time.Duration and UnixNano end
// in 2262), which the status page's next-move time once was not.
const maxPolicyDuration = 100 * 365 * 24 * time.Hour

// parseDuration is time.ParseDuration that insists on a unit: "30" is an error, not 30ns.
func parseDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("duration %s has no unit (write it like 30s, 500ms or 2m)", Quote(s))
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s is not a duration (write it like 30s, 500ms or 2m)", Quote(s))
	}
	return d, nil
}

// formatDuration writes d the short way people write it: 2m rather than 2m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
