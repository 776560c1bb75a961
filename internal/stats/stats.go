package stats

import (
	"math"
	"slices"
)

// Median returns the median of xs (the mean of the middle two when there is an even
// number of them), or 0 when there are none. xs is not changed.
func Median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// MedianCI returns a 95% confidence interval of the median of xs, from their order
// statistics. xs is not changed.
func MedianCI(xs []float64) (lo, hi float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := float64(len(s))
	if n == 0 {
		return 0, 0
	}
	half := 1.96 * math.Sqrt(n) / 2
	i := max(0, int(math.Floor(n/2-half)))
	j := min(len(s)-1, int(math.Ceil(n/2+half))-1)
	return s[i], s[j]
}
