package stats

import "testing"

func TestMedian(t *testing.T) {
	odd := []float64{3, 1, 2}
	if got := Median(odd); got != 2 {
		t.Errorf("Median(3, 1, 2) = %v, want 2", got)
	}
	if odd[0] != 3 {
		t.Error("Median changed its argument")
	}
	if got := Median([]float64{4, 1, 2, 3}); got != 2.5 {
		t.Errorf("Median(4, 1, 2, 3) = %v, want 2.5", got)
	}
	if got := Median(nil); got != 0 {
		t.Errorf("Median(nil) = %v, want 0", got)
	}
}

func TestMedianCI(t *testing.T) {
	xs := make([]float64, 60)
	for i := range xs {
		xs[i] = float64(60 - i)
	}
	lo, hi := MedianCI(xs)
	if m := Median(xs); !(lo < m && m < hi) || lo < 20 || hi > 41 {
		t.Errorf("MedianCI = %v, %v around %v", lo, hi, m)
	}
	if lo, hi := MedianCI([]float64{5}); lo != 5 || hi != 5 {
		t.Errorf("MedianCI(5) = %v, %v", lo, hi)
	}
}
