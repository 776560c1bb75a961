package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	out := []byte(`goos: linux
BenchmarkCallTool/sdk-2         	    5721	    258317 ns/op	    352163 cpu-ns/op	  453766 B/op	     253 allocs/op
BenchmarkIdleMachines-2   	       1	     5496 bytes/machine	         0.001567 extra-wakeups/machine/min
--- BENCH: BenchmarkIdleMachines-2
    idle_bench_test.go:157: opened 10000 connections in 9.766s
PASS
`)
	want := map[string]metrics{
		"BenchmarkCallTool/sdk": {"ns/op": 258317, "cpu-ns/op": 352163, "B/op": 453766, "allocs/op": 253},
		"BenchmarkIdleMachines": {"bytes/machine": 5496, "extra-wakeups/machine/min": 0.001567},
	}
	if diff := cmp.Diff(want, parse(out)); diff != "" {
		t.Errorf("parse (-want +got):\n%s", diff)
	}
}
