package gateway

import "time"

// expiring is a map whose entries are kept for ttl after they were put, and at most
// max of them: past it the oldest are forgotten first. Entries are forgotten in the
// order they were put, so a put costs no more than what it forgets (a scan of every
// entry, under a lock every front request takes, cost a POST whose client went away
// 0.7 ms with a thousand a second). The zero value is not ready: set ttl and max.
// Not safe for concurrent use.
type expiring[K comparable, V any] struct {
	ttl time.Duration
	max int

	by    map[K]expiringEntry[V]
	order []expiringKey[K] // in the order put; one put again or taken since is stale
}

type expiringEntry[V any] struct {
	v  V
	at time.Time
}

type expiringKey[K comparable] struct {
	k  K
	at time.Time
}

// put puts v at k at now, forgetting what has expired, and the oldest past max.
func (e *expiring[K, V]) put(k K, v V, now time.Time) {
	if e.by == nil {
		e.by = map[K]expiringEntry[V]{}
	}
	i := 0
	for ; i < len(e.order); i++ {
		o := e.order[i]
		el, ok := e.by[o.k]
		live := ok && el.at.Equal(o.at)
		if live && now.Sub(o.at) <= e.ttl && len(e.by) < e.max {
			break
		}
		if live {
			delete(e.by, o.k)
		}
		e.order[i] = expiringKey[K]{}
	}
	e.order = e.order[i:]
	if len(e.order) > 2*len(e.by)+64 { // mostly stale (taken, or put again): compact
		live := e.order[:0]
		for _, o := range e.order {
			if el, ok := e.by[o.k]; ok && el.at.Equal(o.at) {
				live = append(live, o)
			}
		}
		clear(e.order[len(live):])
		e.order = live
	}
	e.by[k] = expiringEntry[V]{v, now}
	e.order = append(e.order, expiringKey[K]{k, now})
}

// get returns the value at k, if it has not expired by now.
func (e *expiring[K, V]) get(k K, now time.Time) (V, bool) {
	el, ok := e.by[k]
	if !ok || now.Sub(el.at) > e.ttl {
		var zero V
		return zero, false
	}
	return el.v, true
}

// take returns the value at k, if it has not expired by now, and forgets it.
func (e *expiring[K, V]) take(k K, now time.Time) (V, bool) {
	v, ok := e.get(k, now)
	if ok {
		delete(e.by, k)
	}
	return v, ok
}

// len returns how many entries are kept (some may have expired).
func (e *expiring[K, V]) len() int { return len(e.by) }
