// Package effects holds everything a lifecycle spec refers to by name: the guards that
// route transitions, the actions that keep the books, the delay functions of timed
// transitions, and the invoked effects that dial, probe and close sessions, each bound
// to a method of Effects; and the one place that says what an error means: Classify,
// and Judge, the verdict on whether a failed request may be sent again. Registry
// returns the names for machine.LoadSpec.
package effects
