package probe

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// TestConditionVectors holds the evaluator to the vectors shared by every
// implementation (the daemon's validator, the Python and Go libraries).
func TestConditionVectors(t *testing.T) {
	data, err := os.ReadFile("../../testdata/conditions.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors struct {
		Valid []struct {
			Condition string `json:"condition"`
			Point     struct {
				Kind   string            `json:"kind"`
				Name   string            `json:"name"`
				Value  any               `json:"value"`
				Labels map[string]string `json:"labels"`
			} `json:"point"`
			Result *bool `json:"result"`
		} `json:"valid"`
		Invalid []string `json:"invalid"`
	}
	if err := json.Unmarshal(data, &vectors); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, c := range vectors.Valid {
		if c.Result == nil {
			t.Errorf("%s: the vector names no result", c.Condition)
			continue
		}
		e, err := parseCondition(c.Condition)
		if err != nil {
			t.Errorf("%s: %v", c.Condition, err)
			continue
		}
		pt := condPoint{kind: c.Point.Kind, name: c.Point.Name, value: c.Point.Value, labels: c.Point.Labels}
		if got := e.eval(&pt); got != *c.Result {
			t.Errorf("%s on %+v: got %v, want %v", c.Condition, c.Point, got, *c.Result)
		}
		checked++
	}
	for _, c := range vectors.Invalid {
		if _, err := parseCondition(c); err == nil {
			t.Errorf("%q should not parse", c)
		}
		checked++
	}
	if checked != len(vectors.Valid)+len(vectors.Invalid) || checked < 90 {
		t.Fatalf("only %d vectors", checked)
	}
	t.Logf("%d vectors", checked)
}

func TestGlob(t *testing.T) {
	cases := []struct {
		pattern, name string
		want          bool
	}{
		{"Bash", "Bash", true},
		{"Bash", "Bash2", false},
		{"web_*", "web_search", true},
		{"*_*", "a_b_c", true},
		{"a?c", "abc", true},
		{"[A-C]at", "Bat", true},
		{"[!A-C]at", "Bat", false},
		{"[^A-C]at", "Xat", true},
		{`x\*`, "x*", true},
		{`x\*`, "xy", false},
		{"*", "", true},
		{"[a-]", "-", true},
		{"*b*c", "abxbc", true},
		{"*b*c", "abxbd", false},
		{"é?", "éa", true},
	}
	for _, c := range cases {
		g, err := compileGlob(c.pattern)
		if err != nil {
			t.Fatalf("%q: %v", c.pattern, err)
		}
		if got := g.match(c.name); got != c.want {
			t.Errorf("%q matches %q: got %v", c.pattern, c.name, got)
		}
	}
	for _, bad := range []string{"[abc", "[]", `a\`, "[z-a]"} {
		if _, err := compileGlob(bad); err == nil {
			t.Errorf("%q should not compile", bad)
		}
	}
}

// TestPathologicalVectors holds the parser and the glob matcher to the shared
// vectors built by repetition: inputs over the limits are refused without
// exhausting the stack, and globs match within the time bound.
func TestPathologicalVectors(t *testing.T) {
	data, err := os.ReadFile("../../testdata/conditions.json")
	if err != nil {
		t.Fatal(err)
	}
	type parts [][2]json.RawMessage
	var vectors struct {
		Pathological struct {
			Point struct {
				Kind  string `json:"kind"`
				Name  string `json:"name"`
				Value any    `json:"value"`
			} `json:"point"`
			MaxMS      int64 `json:"max_ms"`
			Conditions []struct {
				About     string `json:"about"`
				Condition parts  `json:"condition"`
				Valid     bool   `json:"valid"`
				Result    bool   `json:"result"`
			} `json:"conditions"`
			Globs []struct {
				About  string `json:"about"`
				Glob   parts  `json:"glob"`
				Name   parts  `json:"name"`
				Valid  bool   `json:"valid"`
				Result bool   `json:"result"`
			} `json:"globs"`
		} `json:"pathological"`
	}
	if err := json.Unmarshal(data, &vectors); err != nil {
		t.Fatal(err)
	}
	build := func(ps parts) string {
		var sb strings.Builder
		for _, p := range ps {
			var text string
			var times int
			if err := json.Unmarshal(p[0], &text); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(p[1], &times); err != nil {
				t.Fatal(err)
			}
			sb.WriteString(strings.Repeat(text, times))
		}
		return sb.String()
	}
	v := vectors.Pathological
	if len(v.Conditions) == 0 || len(v.Globs) == 0 {
		t.Fatal("no pathological vectors")
	}
	pt := condPoint{kind: v.Point.Kind, name: v.Point.Name, value: v.Point.Value}
	for _, c := range v.Conditions {
		e, err := parseCondition(build(c.Condition))
		switch {
		case c.Valid && err != nil:
			t.Errorf("%s: %v", c.About, err)
		case !c.Valid && err == nil:
			t.Errorf("%s: accepted", c.About)
		case c.Valid && e.eval(&pt) != c.Result:
			t.Errorf("%s: got %v", c.About, !c.Result)
		}
	}
	limit := time.Duration(v.MaxMS) * time.Millisecond
	for _, c := range v.Globs {
		pattern, name := build(c.Glob), build(c.Name)
		started := time.Now()
		g, err := compileGlob(pattern)
		switch {
		case c.Valid && err != nil:
			t.Errorf("%s: %v", c.About, err)
		case !c.Valid && err == nil:
			t.Errorf("%s: accepted", c.About)
		case c.Valid && g.match(name) != c.Result:
			t.Errorf("%s: got %v", c.About, !c.Result)
		}
		if took := time.Since(started); took > limit {
			t.Errorf("%s: took %v", c.About, took)
		}
	}
}
