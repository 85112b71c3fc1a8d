package probe

import (
	"context"
	"testing"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
)

func testArming(mode stepdv1.ProbeMode, depth uint32, honour bool, target []int32, matchers ...*stepdv1.ArmedMatcher) *arming {
	return compileArmed(&stepdv1.Armed{Mode: mode, Depth: depth, HonourBreakpoints: honour, TargetCoor: target, Matchers: matchers}, 1)
}

func TestDecisionTable(t *testing.T) {
	bash := &stepdv1.ArmedMatcher{BreakpointId: "bp1", PointKind: "tool_call", NameGlob: "Bash"}
	rm := &stepdv1.ArmedMatcher{BreakpointId: "bp2", NameGlob: "B*", Condition: `value.cmd contains "rm"`}
	broken := &stepdv1.ArmedMatcher{BreakpointId: "bp3", Condition: `value ==`}
	const (
		BP    = stepdv1.ProbeMode_PROBE_MODE_BREAKPOINTS
		STEP  = stepdv1.ProbeMode_PROBE_MODE_STEP
		DEPTH = stepdv1.ProbeMode_PROBE_MODE_DEPTH
		NONE  = stepdv1.ProbeMode_PROBE_MODE_NONE
		TRACE = stepdv1.ProbeMode_PROBE_MODE_TRACE
	)
	type pt struct {
		kind, name string
		value      any
		depth      int
		coor       []int32
	}
	bashLs := pt{"tool_call", "Bash", map[string]any{"cmd": "ls"}, 1, []int32{3}}
	bashRm := pt{"tool_call", "Bash", map[string]any{"cmd": "rm -rf x"}, 1, []int32{3}}
	read := pt{"tool_call", "Read", map[string]any{"path": "a"}, 1, []int32{4}}
	top := pt{"turn_end", "x", nil, 0, []int32{0}}
	cases := []struct {
		name    string
		a       *arming
		p       pt
		want    verdict
		wantIDs []string
	}{
		{"no matchers", testArming(BP, 0, true, nil), bashLs, pass, nil},
		{"kind and name", testArming(BP, 0, true, nil, bash), bashLs, hold, []string{"bp1"}},
		{"other name", testArming(BP, 0, true, nil, bash), read, pass, nil},
		{"condition false", testArming(BP, 0, true, nil, rm), bashLs, pass, nil},
		{"condition true, both", testArming(BP, 0, true, nil, bash, rm), bashRm, hold, []string{"bp1", "bp2"}},
		{"broken condition never holds", testArming(BP, 0, true, nil, broken), bashLs, pass, nil},
		{"target coor", testArming(BP, 0, false, []int32{4}, bash), read, hold, nil},
		{"target coor, forced past breakpoints", testArming(BP, 0, false, []int32{4}, bash), bashLs, pass, nil},
		{"target coor, honouring breakpoints", testArming(BP, 0, true, []int32{4}, bash), bashLs, hold, []string{"bp1"}},
		{"step", testArming(STEP, 0, true, nil), read, hold, nil},
		{"depth: inside", testArming(DEPTH, 1, false, nil, bash), bashLs, pass, nil},
		{"depth: inside, honouring", testArming(DEPTH, 1, true, nil, bash), bashLs, hold, []string{"bp1"}},
		{"depth: scope ended", testArming(DEPTH, 1, false, nil), top, hold, nil},
		{"none: inside", testArming(NONE, 1, false, nil, bash), bashLs, pass, nil},
		{"trace: matcher", testArming(TRACE, 0, true, nil, bash), bashLs, hold, []string{"bp1"}},
		{"trace: other", testArming(TRACE, 0, true, nil, bash), read, trace, nil},
	}
	p := &Probe{}
	for _, c := range cases {
		p.armed.Store(c.a)
		point := point{kind: c.p.kind, name: c.p.name, value: c.p.value}
		got, _, ids := p.decide(c.a, c.p.depth, c.p.coor, &point, nil)
		if got != c.want || len(ids) != len(c.wantIDs) {
			t.Errorf("%s: got %v %v, want %v %v", c.name, got, ids, c.want, c.wantIDs)
			continue
		}
		for i := range ids {
			if ids[i] != c.wantIDs[i] {
				t.Errorf("%s: ids %v, want %v", c.name, ids, c.wantIDs)
			}
		}
	}

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
