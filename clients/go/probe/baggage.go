package probe

import (
	"context"

	"go.opentelemetry.io/otel/baggage"
)

// baggageEntry is one entry a request's baggage must carry.
type baggageEntry struct{ key, value string }

// requestBaggage is the W3C baggage of the request a point is reached in,
// read from the point's context at most once, by the first matcher scoped
// to a request.
type requestBaggage struct {
	read bool
	bag  baggage.Baggage
}

// carries reports whether the request's baggage has every entry, key and
// value equal. A request without baggage carries none.
func (r *requestBaggage) carries(ctx context.Context, entries []baggageEntry) bool {
	if !r.read {
		r.read = true
		if ctx != nil {
			r.bag = baggage.FromContext(ctx)
		}
	}
	if r.bag.Len() == 0 {
		return false
	}
	for _, e := range entries {
		m := r.bag.Member(e.key)
		if m.Key() == "" || m.Value() != e.value {
			return false
		}
	}
	return true
}
