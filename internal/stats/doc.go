// Package stats holds the few statistics the benchmarks and the performance budget
// report: medians, and a confidence interval of a median that assumes nothing about
// the distribution (timings on a shared machine are anything but normal).
package stats
