package probe

import (
	"context"
	"encoding/json"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
	"google.golang.org/protobuf/proto"
)

// arming is a compiled Armed: what the library consults for every point.
// It is immutable once built; the probe swaps it atomically.
type arming struct {
	raw      *stepdv1.Armed
	mode     stepdv1.ProbeMode
	matchers []matcher
	depth    int
	target   []int32
	honour   bool
	// scope is the request the mode is about (Armed.request_scope): the
	// mode applies only where the request's baggage carries every entry;
	// elsewhere only the matchers decide. Empty = the whole process.
	scope []baggageEntry
	// gen identifies the connection this arming came from.
	gen uint64
}

type matcher struct {
	id   string
	kind string
	name *glob // nil: any name
	cond condExpr
	// baggage is the request scope: entries the request's W3C baggage
	// must carry (ProbeMatch.baggage); empty = every request.
	baggage []baggageEntry
	// bad is set when the glob or the condition does not compile here:
	// such a matcher never matches (a condition that fails never holds).
	bad bool
}

func compileArmed(a *stepdv1.Armed, gen uint64) *arming {
	if a == nil {
		a = &stepdv1.Armed{Mode: stepdv1.ProbeMode_PROBE_MODE_BREAKPOINTS, HonourBreakpoints: true}
	}
	c := &arming{
		raw:    a,
		mode:   a.GetMode(),
		depth:  int(a.GetDepth()),
		target: a.GetTargetCoor(),
		honour: a.GetHonourBreakpoints(),
		gen:    gen,
	}
	if c.mode == stepdv1.ProbeMode_PROBE_MODE_UNSPECIFIED {
		c.mode = stepdv1.ProbeMode_PROBE_MODE_BREAKPOINTS
	}
	for _, e := range a.GetRequestScope() {
		c.scope = append(c.scope, baggageEntry{key: e.GetKey(), value: e.GetValue()})
	}
	for _, m := range a.GetMatchers() {
		cm := matcher{id: m.GetBreakpointId(), kind: m.GetPointKind()}
		if g := m.GetNameGlob(); g != "" {
			compiled, err := compileGlob(g)
			if err != nil {
				cm.bad = true
			}
			cm.name = compiled
		}
		for _, e := range m.GetBaggage() {
			cm.baggage = append(cm.baggage, baggageEntry{key: e.GetKey(), value: e.GetValue()})
		}
		if cond := m.GetCondition(); cond != "" {
			e, err := parseCondition(cond)
			if err != nil {
				cm.bad = true
			}
			cm.cond = e
		}
		c.matchers = append(c.matchers, cm)
	}
	return c
}

// withMode is a copy of a in another mode (NONE switching itself back to
// BREAKPOINTS once its scope has ended, DEPTH to STEP). BREAKPOINTS is
// about every request; STEP stays about a's.
func (a *arming) withMode(mode stepdv1.ProbeMode) *arming {
	b := *a
	b.mode = mode
	b.target = nil
	b.honour = true
	raw := proto.Clone(a.raw).(*stepdv1.Armed)
	raw.Mode = mode
	raw.TargetCoor = nil
	raw.HonourBreakpoints = true
	raw.Depth = 0
	if mode == stepdv1.ProbeMode_PROBE_MODE_BREAKPOINTS {
		raw.RequestScope = nil
		b.scope = nil
	}
	b.raw = raw
	b.depth = 0
	return &b
}

// appliesTo reports whether a's mode applies at a point reached with ctx:
// always, unless the mode is about one request and ctx is another's.
func (a *arming) appliesTo(ctx context.Context) bool {
	if len(a.scope) == 0 {
		return true
	}
	var bag requestBaggage
	return bag.carries(ctx, a.scope)
}

// point is what a decision looks at. value is converted to JSON lazily:
// only a matcher with a condition needs it; the request's baggage is read
// from ctx lazily too, only for a matcher scoped to a request.
type point struct {
	kind, name string
	value      any
	converted  bool
	jsonValue  any
	labels     map[string]string
	ctx        context.Context
	bag        requestBaggage
	// outside is set by decide when the arming's mode is about another
	// request: only the matchers decided (Hit.outside_request_scope).
	outside bool
}

func (pt *point) jsonVal() any {
	if !pt.converted {
		pt.converted = true
		pt.jsonValue = toJSONValue(pt.value)
	}
	return pt.jsonValue
}

// toJSONValue is v as the JSON-like tree encoding/json decodes into any.
func toJSONValue(v any) any {
	if out, ok := normalize(v, 0); ok {
		return out
	}
	if err, ok := v.(error); ok {
		return err.Error()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return nil
	}
	return out
}

// matching appends the ids of the matchers that match pt.
func (a *arming) matching(pt *point, ids []string) []string {
	for i := range a.matchers {
		m := &a.matchers[i]
		if m.bad {
			continue
		}
		if m.kind != "" && m.kind != pt.kind {
			continue
		}
		if m.name != nil && !m.name.match(pt.name) {
			continue
		}
		if len(m.baggage) > 0 && !pt.bag.carries(pt.ctx, m.baggage) {
			continue
		}
		if m.cond != nil {
			cp := condPoint{kind: pt.kind, name: pt.name, value: pt.jsonVal(), labels: pt.labels}
			if !safeEval(m.cond, &cp) {
				continue
			}
		}
		ids = append(ids, m.id)
	}
	return ids
}

// safeEval never lets a condition panic into the program.
func safeEval(e condExpr, p *condPoint) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return e.eval(p)
}

// verdict is the local decision for one point.
type verdict uint8

const (
	pass  verdict = iota // go on, nothing sent
	hold                 // send a Hit and wait
	trace                // report a TraceReport, go on
)

// normalize converts the common JSON-like Go values without encoding/json;
// false for anything else (structs, pointers, ...), which goes through it.
func normalize(v any, depth int) (any, bool) {
	if depth > 64 {
		return nil, false
	}
	switch x := v.(type) {
	case nil, bool, float64, string:
		return x, true
	case int:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint:
		return float64(x), true
	case uint32:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float32:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case []string:
		out := make([]any, len(x))
		for i, s := range x {
			out[i] = s
		}
		return out, true
	case map[string]string:
		out := make(map[string]any, len(x))
		for k, s := range x {
			out[k] = s
		}
		return out, true
	case []any:
		out := make([]any, len(x))
		for i, item := range x {
			n, ok := normalize(item, depth+1)
			if !ok {
				return nil, false
			}
			out[i] = n
		}
		return out, true
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, item := range x {
			n, ok := normalize(item, depth+1)
			if !ok {
				return nil, false
			}
			out[k] = n
		}
		return out, true
	}
	return nil, false
}
