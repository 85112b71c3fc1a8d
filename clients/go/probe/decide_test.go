package probe

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/baggage"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
)

func testArming(mode stepdv1.ProbeMode, depth uint32, honour bool, target []int32, matchers ...*stepdv1.ArmedMatcher) *arming {
	return compileArmed(&stepdv1.Armed{Mode: mode, Depth: depth, HonourBreakpoints: honour, TargetCoor: target, Matchers: matchers}, 1)
}

// TestDecisionVectors holds decide to the table shared with the Python
// library: whether a point holds, and exactly which breakpoint ids it reports.
func TestDecisionVectors(t *testing.T) {
	data, err := os.ReadFile("../../testdata/decisions.json")
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		Point         string   `json:"point"`
		Verdict       string   `json:"verdict"`
		BreakpointIDs []string `json:"breakpoint_ids"`
		OutsideScope  bool     `json:"outside_scope"`
		ModeAfter     string   `json:"mode_after"`
	}
	type entry struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	var table struct {
		Matchers map[string]struct {
			BreakpointID string  `json:"breakpoint_id"`
			PointKind    string  `json:"point_kind"`
			NameGlob     string  `json:"name_glob"`
			Condition    string  `json:"condition"`
			Baggage      []entry `json:"baggage"`
		} `json:"matchers"`
		Points map[string]struct {
			Kind    string            `json:"kind"`
			Name    string            `json:"name"`
			Value   any               `json:"value"`
			Depth   int               `json:"depth"`
			Coor    []int32           `json:"coor"`
			Baggage map[string]string `json:"baggage"`
		} `json:"points"`
		Cases []struct {
			Name  string `json:"name"`
			Armed struct {
				Mode         string   `json:"mode"`
				Matchers     []string `json:"matchers"`
				Depth        uint32   `json:"depth"`
				TargetCoor   []int32  `json:"target_coor"`
				Honour       bool     `json:"honour_breakpoints"`
				RequestScope []entry  `json:"request_scope"`
			} `json:"armed"`
			step
			Steps []step `json:"steps"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &table); err != nil {
		t.Fatal(err)
	}
	verdicts := map[string]verdict{"hold": hold, "pass": pass, "trace": trace}
	mode := func(name string) stepdv1.ProbeMode {
		m, ok := stepdv1.ProbeMode_value["PROBE_MODE_"+name]
		if !ok {
			t.Fatalf("unknown mode %q", name)
		}
		return stepdv1.ProbeMode(m)
	}
	for _, c := range table.Cases {
		armed := &stepdv1.Armed{Mode: mode(c.Armed.Mode), Depth: c.Armed.Depth, TargetCoor: c.Armed.TargetCoor, HonourBreakpoints: c.Armed.Honour}
		for _, e := range c.Armed.RequestScope {
			armed.RequestScope = append(armed.RequestScope, &stepdv1.BaggageEntry{Key: e.Key, Value: e.Value})
		}
		for _, name := range c.Armed.Matchers {
			m, ok := table.Matchers[name]
			if !ok {
				t.Fatalf("%s: unknown matcher %q", c.Name, name)
			}
			am := &stepdv1.ArmedMatcher{BreakpointId: m.BreakpointID, PointKind: m.PointKind, NameGlob: m.NameGlob, Condition: m.Condition}
			for _, e := range m.Baggage {
				am.Baggage = append(am.Baggage, &stepdv1.BaggageEntry{Key: e.Key, Value: e.Value})
			}
			armed.Matchers = append(armed.Matchers, am)
		}
		steps := c.Steps
		if len(steps) == 0 {
			steps = []step{c.step}
		}
		p := &Probe{}
		p.armed.Store(compileArmed(armed, 1))
		for i, s := range steps {
			pt, ok := table.Points[s.Point]
			if !ok {
				t.Fatalf("%s: unknown point %q", c.Name, s.Point)
			}
			want, ok := verdicts[s.Verdict]
			if !ok {
				t.Fatalf("%s: unknown verdict %q", c.Name, s.Verdict)
			}
			// Each step is decided under the arming the previous one left.
			a := p.armed.Load()
			point := point{kind: pt.Kind, name: pt.Name, value: pt.Value, ctx: requestContext(t, pt.Baggage)}
			got, after, ids := p.decide(a, pt.Depth, pt.Coor, &point, nil)
			if got != want || !slices.Equal(ids, s.BreakpointIDs) {
				t.Errorf("%s [%d]: got %s %q, want %s %q", c.Name, i, verdictName(got), ids, s.Verdict, s.BreakpointIDs)
			}
			if got == hold && point.outside != s.OutsideScope {
				t.Errorf("%s [%d]: outside the request scope %v, want %v", c.Name, i, point.outside, s.OutsideScope)
			}
			if s.ModeAfter != "" && after.mode != mode(s.ModeAfter) {
				t.Errorf("%s [%d]: mode after %v, want %s", c.Name, i, after.mode, s.ModeAfter)
			}
		}
	}
	if len(table.Cases) < 30 {
		t.Fatalf("only %d cases", len(table.Cases))
	}
}

// requestContext is a context carrying entries as its OpenTelemetry
// baggage, as a propagator leaves it; none for no entries.
func requestContext(t testing.TB, entries map[string]string) context.Context {
	ctx := context.Background()
	if len(entries) == 0 {
		return ctx
	}
	var members []baggage.Member
	for k, v := range entries {
		m, err := baggage.NewMemberRaw(k, v)
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, m)
	}
	bag, err := baggage.New(members...)
	if err != nil {
		t.Fatal(err)
	}
	return baggage.ContextWithBaggage(ctx, bag)
}

func verdictName(v verdict) string {
	return map[verdict]string{hold: "hold", pass: "pass", trace: "trace"}[v]
}

// NONE switches itself back to BREAKPOINTS when its scope ends, too.
func TestNoneEndsWithItsScope(t *testing.T) {
	bash := &stepdv1.ArmedMatcher{BreakpointId: "bp1", PointKind: "tool_call", NameGlob: "Bash"}
	const (
		BP   = stepdv1.ProbeMode_PROBE_MODE_BREAKPOINTS
		NONE = stepdv1.ProbeMode_PROBE_MODE_NONE
	)
	p := &Probe{}
	// NONE switches itself back to BREAKPOINTS at a smaller depth: at a point...
	a := testArming(NONE, 1, false, nil, bash)
	p.armed.Store(a)
	topBash := point{kind: "tool_call", name: "Bash"}
	if v, _, _ := p.decide(a, 0, []int32{0}, &topBash, nil); v != hold {
		t.Errorf("NONE above its depth: %v, want hold", v)
	}
	if m := p.armed.Load().mode; m != BP {
		t.Errorf("mode after NONE ended: %v", m)
	}
	// ... and when its scope ends.
	p.armed.Store(testArming(NONE, 2, false, nil, bash))
	ctx, endTurn := p.Scope(context.Background(), "turn")
	_, endTool := p.Scope(ctx, "tool")
	endTool()
	if m := p.armed.Load().mode; m != BP {
		t.Errorf("mode after the scope ended: %v", m)
	}
	endTurn()
}

// A mode about one request ends with that request's scope only: another
// request leaving its scopes leaves it as it was.
func TestScopedModeEndsWithItsRequestsScope(t *testing.T) {
	bash := &stepdv1.ArmedMatcher{BreakpointId: "bp1", PointKind: "tool_call", NameGlob: "Bash"}
	ana := []*stepdv1.BaggageEntry{{Key: "debug-session", Value: "ana"}}
	for _, c := range []struct {
		mode, after stepdv1.ProbeMode
	}{
		{stepdv1.ProbeMode_PROBE_MODE_NONE, stepdv1.ProbeMode_PROBE_MODE_BREAKPOINTS},
		{stepdv1.ProbeMode_PROBE_MODE_DEPTH, stepdv1.ProbeMode_PROBE_MODE_STEP},
	} {
		p := &Probe{}
		p.armed.Store(compileArmed(&stepdv1.Armed{Mode: c.mode, Depth: 1, Matchers: []*stepdv1.ArmedMatcher{bash}, RequestScope: ana}, 1))
		for _, bag := range []map[string]string{nil, {"debug-session": "bob"}} {
			_, end := p.Scope(requestContext(t, bag), "turn")
			end()
			if m := p.armed.Load().mode; m != c.mode {
				t.Errorf("%v after another request's scope ended: %v", c.mode, m)
			}
		}
		_, end := p.Scope(requestContext(t, map[string]string{"debug-session": "ana"}), "turn")
		end()
		a := p.armed.Load()
		if a.mode != c.after {
			t.Errorf("%v after the request's own scope ended: %v, want %v", c.mode, a.mode, c.after)
		}
		// Back to breakpoints, the arming is about every request again;
		// a step stays the request's.
		if scoped := len(a.scope) > 0; scoped != (c.after == stepdv1.ProbeMode_PROBE_MODE_STEP) {
			t.Errorf("%v: still about the request: %v", a.mode, scoped)
		}
	}
}

func TestCoordinates(t *testing.T) {
	p := &Probe{}
	var buf [8]int32
	if c := p.tick(nil, buf[:0]); len(c) != 1 || c[0] != 0 {
		t.Fatalf("first top-level coor %v", c)
	}
	if c := p.tick(nil, buf[:0]); c[0] != 1 {
		t.Fatalf("second top-level coor %v", c)
	}
	ctx, end := p.Scope(context.Background(), "turn")
	defer end()
	s := p.scopeOf(ctx)
	if c := p.tick(s, buf[:0]); len(c) != 1 || c[0] != 0 {
		t.Fatalf("coor in turn %v", c)
	}
	ctx2, end2 := p.Scope(ctx, "tool")
	defer end2()
	s2 := p.scopeOf(ctx2)
	if c := p.tick(s2, buf[:0]); len(c) != 2 || c[0] != 1 || c[1] != 0 {
		t.Fatalf("coor in tool %v", c)
	}
	if path := s2.path(); len(path) != 2 || path[0] != "turn" || path[1] != "tool" {
		t.Fatalf("scope path %v", path)
	}
	// A nil probe never holds and never panics.
	var nilProbe *Probe
	v, err := nilProbe.Hold(context.Background(), "k", "n", 3)
	if v != 3 || err != nil {
		t.Fatal(v, err)
	}
}
