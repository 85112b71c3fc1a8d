package stepd

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
)

// SpecOption sets a common field of a breakpoint spec.
type SpecOption func(*stepdv1.BreakpointSpec)

// SourceBreakpoint is a breakpoint on a 1-based line of a source file.
func SourceBreakpoint(path string, line uint32, opts ...SpecOption) *stepdv1.BreakpointSpec {
	return build(&stepdv1.BreakpointSpec{Location: &stepdv1.BreakpointSpec_Source{
		Source: &stepdv1.SourceLocation{Path: path, Line: line},
	}}, opts)
}

// FunctionBreakpoint is a breakpoint on a function, by name.
func FunctionBreakpoint(name string, opts ...SpecOption) *stepdv1.BreakpointSpec {
	return build(&stepdv1.BreakpointSpec{Location: &stepdv1.BreakpointSpec_Function{
		Function: &stepdv1.FunctionLocation{Name: name},
	}}, opts)
}

// ExceptionBreakpoint enables the adapter's exception filters (e.g. "raised", "uncaught").
func ExceptionBreakpoint(filterIDs []string, opts ...SpecOption) *stepdv1.BreakpointSpec {
	return build(&stepdv1.BreakpointSpec{Location: &stepdv1.BreakpointSpec_Exception{
		Exception: &stepdv1.ExceptionFilters{FilterIds: filterIDs},
	}}, opts)
}

// ProbeBreakpoint holds probe points of a kind ("" = every kind) whose name
// matches a glob ("" = every name).
func ProbeBreakpoint(pointKind, nameGlob string, opts ...SpecOption) *stepdv1.BreakpointSpec {
	return build(&stepdv1.BreakpointSpec{Location: &stepdv1.BreakpointSpec_Probe{
		Probe: &stepdv1.ProbeMatch{PointKind: pointKind, NameGlob: nameGlob},
	}}, opts)
}

func build(spec *stepdv1.BreakpointSpec, opts []SpecOption) *stepdv1.BreakpointSpec {
	for _, opt := range opts {
		opt(spec)
	}
	return spec
}

// Column sets the 1-based column of a source breakpoint.
func Column(column uint32) SpecOption {
	return func(s *stepdv1.BreakpointSpec) {
		if src := s.GetSource(); src != nil {
			src.Column = column
		}
	}
}

// Enabled sets whether the breakpoint applies (new breakpoints are enabled by default).
func Enabled(enabled bool) SpecOption {
	return func(s *stepdv1.BreakpointSpec) { s.Enabled = &enabled }
}

// Condition sets the condition, in the debuggee's language or over a probe's held value.
func Condition(expr string) SpecOption {
	return func(s *stepdv1.BreakpointSpec) { s.Condition = expr }
}

// HitCondition sets the hit condition: "N", "==N", ">N", ">=N", "<N", "<=N" or "%N".
func HitCondition(cond string) SpecOption {
	return func(s *stepdv1.BreakpointSpec) { s.HitCondition = cond }
}

// LabelSelector limits the breakpoint to sessions whose labels match, e.g. "env=ci,!subagent".
func LabelSelector(selector string) SpecOption {
	return func(s *stepdv1.BreakpointSpec) { s.LabelSelector = selector }
}

// ExpiresAt makes the breakpoint stop applying after t.
func ExpiresAt(t time.Time) SpecOption {
	return func(s *stepdv1.BreakpointSpec) { s.ExpiresAt = timestamppb.New(t) }
}

// MaxHits makes the breakpoint stop applying after n hits across sessions.
func MaxHits(n uint32) SpecOption {
	return func(s *stepdv1.BreakpointSpec) { s.MaxHits = n }
}

// LogMessage makes the breakpoint a logpoint: it emits message, with
// `{expression}` parts interpolated, and goes on.
func LogMessage(message string) SpecOption {
	return func(s *stepdv1.BreakpointSpec) {
		s.Action = stepdv1.BreakpointAction_BREAKPOINT_ACTION_LOG
		s.LogMessage = message
	}
}

// Snapshot makes the breakpoint capture the stack and locals and go on without pausing.
func Snapshot() SpecOption {
	return func(s *stepdv1.BreakpointSpec) { s.Action = stepdv1.BreakpointAction_BREAKPOINT_ACTION_SNAPSHOT }
}

// HoldLimit sets how long a probe hold may last before it resolves as CONTINUE.
func HoldLimit(d time.Duration) SpecOption {
	return func(s *stepdv1.BreakpointSpec) { s.HoldLimit = durationpb.New(d) }
}
