package machine

import "sort"

// didYouMean returns ` (did you mean "x"?)` for the candidate nearest to name, or ""
// when none is near enough to be a likely typo.
func didYouMean(name string, candidates []string) string {
	best, bestD := "", 1<<30
	for _, c := range candidates {
		if d := editDistance(name, c); d < bestD || (d == bestD && c < best) {
			best, bestD = c, d
		}
	}
	limit := 2
	if len(name) <= 4 {
		limit = 1
	}
	if best == "" || bestD > limit {
		return ""
	}
	return ` (did you mean "` + best + `"?)`
}

// editDistance is the Levenshtein distance between a and b, counting an adjacent
// transposition as one edit.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
