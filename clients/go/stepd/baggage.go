package stepd

import (
	"crypto/rand"
	"encoding/hex"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
)

// DefaultBaggageKey is the baggage key MintBaggage uses when given none.
const DefaultBaggageKey = "debug-session"

// SessionBaggage is a W3C baggage entry that marks one person's requests in
// a shared mesh: send it in a `baggage` header and scope probe breakpoints
// to it with [RequestBaggage], so only those requests hold.
type SessionBaggage struct {
	Key, Value string
}

// MintBaggage makes a fresh entry under key ("" = DefaultBaggageKey) with a
// random value (64 bits as 16 hex digits), the same as `stepctl baggage mint`.
func MintBaggage(key string) SessionBaggage {
	if key == "" {
		key = DefaultBaggageKey
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	return SessionBaggage{Key: key, Value: hex.EncodeToString(b[:])}
}

// String is the entry as a `baggage` header value, KEY=VALUE.
func (b SessionBaggage) String() string { return b.Key + "=" + b.Value }

// Header is the header line to send, e.g. `baggage: debug-session=…`
// (`curl -H "$(…)"`).
func (b SessionBaggage) Header() string { return "baggage: " + b.String() }

// Spec scopes a probe breakpoint to requests that carry this entry.
func (b SessionBaggage) Spec() SpecOption { return RequestBaggage(b.Key, b.Value) }

// RequestBaggage scopes a probe breakpoint to one request: it holds only
// where the current request's W3C baggage carries key=value (the probe
// library reads it from the program's OpenTelemetry context). Repeat it to
// require several entries.
func RequestBaggage(key, value string) SpecOption {
	return func(s *stepdv1.BreakpointSpec) {
		if p := s.GetProbe(); p != nil {
			p.Baggage = append(p.Baggage, &stepdv1.BaggageEntry{Key: key, Value: value})
		}
	}
}
