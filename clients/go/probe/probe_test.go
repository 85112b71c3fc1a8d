package probe_test

import (
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

func mustValue(t testing.TB, v any) *structpb.Value {
	t.Helper()
	pv, err := structpb.NewValue(v)
	if err != nil {
		t.Fatal(err)
	}
	return pv
}

// A breakpoint on one tool name holds there only; INJECT changes what the
// program goes on with, an invalid value is refused and the pause stays.
func TestBreakpointOnOneNameAndInject(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	a := startAgent(t, d)
	bps := arm(t, c, a, stepd.ProbeBreakpoint("tool_call", "Bash"))
	a.send("run")

	// The point observed before the hold became an event ahead of its pause.
	o := ev.waitFor("observed", func(e *stepdv1.Event) bool {
		return e.GetObserved() != nil || e.GetStopped().GetPause() != nil
	})
	if o.GetObserved().GetKind() != "skill_loaded" || o.GetObserved().GetName() != "pdf" {
		t.Errorf("before the pause: %v", o)
	}
	p := ev.pause(a.session)
	if p.GetPoint().GetName() != "Bash" || p.GetPoint().GetKind() != "tool_call" {
		t.Fatalf("held at %v", p.GetPoint())
	}
	if p.GetReason() != stepdv1.PauseReason_PAUSE_REASON_HOLD {
		t.Errorf("reason %v", p.GetReason())
	}
	if !slices.Equal(p.GetPoint().GetScopePath(), []string{"turn", "tool"}) {
		t.Errorf("scope path %v", p.GetPoint().GetScopePath())
	}
	// prompt (turn 0), Read (turn 1, tool 0), Bash (turn 2, tool 1).
	if !slices.Equal(p.GetCoor(), []int32{2, 1}) {
		t.Errorf("coor %v", p.GetCoor())
	}
	if !slices.Equal(p.GetBreakpointIds(), bps) {
		t.Errorf("breakpoint ids %v, want %v", p.GetBreakpointIds(), bps)
	}
	if p.GetLocation().GetFunction() != "runTurn" || p.GetLocation().GetModule() != "main" {
		t.Errorf("location %v", p.GetLocation())
	}
	if !strings.Contains(p.GetDebugValue().GetText(), `"ls"`) {
		t.Errorf("debug value %v", p.GetDebugValue())
	}
	for _, k := range []stepdv1.CommandKind{stepdv1.CommandKind_COMMAND_KIND_INJECT, stepdv1.CommandKind_COMMAND_KIND_SKIP, stepdv1.CommandKind_COMMAND_KIND_EVAL} {
		if !slices.Contains(p.GetInputType(), k) {
			t.Errorf("%v not offered: %v", k, p.GetInputType())
		}
	}
	// The points before it did not hold.
	if !a.printed("point prompt user") {
		a.expect("point prompt user")
	}
	a.expect("point tool_call Read")

	// Not a dict: refused, the pause stays.
	_, err := c.SendDebugInput(testContext(t), p.GetKey(), stepd.CmdInjectValue(structpb.NewStringValue("not a dict")))
	if !errors.Is(err, stepd.ErrInvalidValue) {
		t.Fatalf("invalid INJECT: %v", err)
	}
	pauses, err := c.ListPauses(testContext(t), a.session)
	if err != nil || len(pauses) != 1 || pauses[0].GetKey() != p.GetKey() {
		t.Fatalf("pauses after a refused INJECT: %v %v", pauses, err)
	}
	answer(t, c, p.GetKey(), stepd.CmdInjectValue(mustValue(t, map[string]any{"cmd": "pwd", "turn": 7})))
	if got := a.expect("point tool_call Bash"); got != `point tool_call Bash value={"cmd":"pwd","turn":7} err=nil` {
		t.Errorf("after INJECT: %s", got)
	}
	if got := a.expect("point tool_result Bash"); got != `point tool_result Bash value="ran pwd" err=nil` {
		t.Errorf("tool result: %s", got)
	}
	a.expect("done")
}

// SKIP: the held call is not performed (ErrSkipped); QUIT: ErrStopped.
func TestSkipAndQuit(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	a := startAgent(t, d, "-turns", "3")
	arm(t, c, a, stepd.ProbeBreakpoint("tool_call", "Bash"))
	a.send("run")

	p := ev.pause(a.session)
	answer(t, c, p.GetKey(), stepd.CmdSkip())
	if got := a.expect("point tool_call Bash"); !strings.HasSuffix(got, "err=skipped") {
		t.Errorf("after SKIP: %s", got)
	}
	// The skipped call's result point is not reached.
	if got := a.expect("point "); !strings.HasPrefix(got, "point turn_end") {
		t.Errorf("after a skipped call: %s", got)
	}
	p = ev.pause(a.session)
	answer(t, c, p.GetKey(), stepd.CmdQuit())
	if got := a.expect("point tool_call Bash"); !strings.HasSuffix(got, "err=stopped") {
		t.Errorf("after QUIT: %s", got)
	}
	if got := a.expect("done"); got != "done" {
		t.Error(got)
	}
	// Stopped in turn 1: turn 2 never ran.
	if a.printed(`point prompt user value="hello 2"`) {
		t.Error("the program went on after QUIT")
	}
}

// NEXT holds at the very next point, whatever it is.
func TestNextStepsToTheVeryNextPoint(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	a := startAgent(t, d)
	arm(t, c, a, stepd.ProbeBreakpoint("tool_call", "Bash"))
	a.send("run")

	p := ev.pause(a.session)
	answer(t, c, p.GetKey(), stepd.CmdNext())
	p = ev.pause(a.session)
	if p.GetPoint().GetKind() != "tool_result" {
		t.Fatalf("NEXT held at %v", p.GetPoint())
	}
	answer(t, c, p.GetKey(), stepd.CmdNext())
	p = ev.pause(a.session)
	if p.GetPoint().GetKind() != "turn_end" || !slices.Equal(p.GetPoint().GetScopePath(), []string{"turn"}) {
		t.Fatalf("second NEXT held at %v", p.GetPoint())
	}
	answer(t, c, p.GetKey(), stepd.CmdContinue())
	a.expect("done")
}

// OUT with force: no holds until the held point's scope has ended, not even
// at breakpoints on the way.
func TestOutForce(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	a := startAgent(t, d)
	arm(t, c, a, stepd.ProbeBreakpoint("tool_call", "Bash"), stepd.ProbeBreakpoint("tool_result", "*"))
	a.send("run")

	p := ev.pause(a.session)
	if p.GetPoint().GetName() != "Bash" || p.GetPoint().GetKind() != "tool_call" {
		t.Fatalf("held at %v", p.GetPoint())
	}
	answer(t, c, p.GetKey(), stepd.CmdStepOut(true))
	p = ev.pause(a.session)
	if p.GetPoint().GetKind() != "turn_end" {
		t.Fatalf("OUT force held at %v (a breakpoint on the way?)", p.GetPoint())
	}
	if !a.printed("point tool_result Bash") {
		a.expect("point tool_result Bash")
	}
	answer(t, c, p.GetKey(), stepd.CmdContinue())
	a.expect("done")
}

// OUT without force stops at a breakpoint on the way.
func TestOutHonoursBreakpoints(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	a := startAgent(t, d)
	arm(t, c, a, stepd.ProbeBreakpoint("tool_call", "Bash"), stepd.ProbeBreakpoint("tool_result", "*"))
	a.send("run")
	p := ev.pause(a.session)
	answer(t, c, p.GetKey(), stepd.CmdStepOut(false))
	p = ev.pause(a.session)
	if p.GetPoint().GetKind() != "tool_result" {
		t.Fatalf("OUT held at %v", p.GetPoint())
	}
	answer(t, c, p.GetKey(), stepd.CmdContinue())
	a.expect("done")
}

// CONTINUE_ALL: no holds until the top-level scope ends; the next turn's
// breakpoints hold again.
func TestContinueAll(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	a := startAgent(t, d, "-turns", "2")
	arm(t, c, a, stepd.ProbeBreakpoint("prompt", ""), stepd.ProbeBreakpoint("tool_call", "Bash"))
	a.send("run")

	p := ev.pause(a.session)
	if p.GetPoint().GetKind() != "prompt" || p.GetDebugValue().GetText() != "hello 0" {
		t.Fatalf("held at %v %v", p.GetPoint(), p.GetDebugValue())
	}
	answer(t, c, p.GetKey(), stepd.CmdContinueAll())
	p = ev.pause(a.session)
	if p.GetPoint().GetKind() != "prompt" || p.GetDebugValue().GetText() != "hello 1" {
		t.Fatalf("after CONTINUE_ALL held at %v %v", p.GetPoint(), p.GetDebugValue())
	}
	// Turn 0's Bash call ran without holding.
	a.expect(`point tool_call Bash value={"cmd":"ls","turn":0}`)
	answer(t, c, p.GetKey(), stepd.CmdContinueAll())
	a.expect("done")
	if a.printed("point tool_call Bash") && !a.printed(`point tool_call Bash value={"cmd":"ls","turn":1}`) {
		t.Error("turn 1's Bash call did not run")
	}
}

// EVAL goes to the probe's Eval option; an evaluation error keeps the pause.
func TestEval(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	a := startAgent(t, d, "-turns", "2")
	arm(t, c, a, stepd.ProbeBreakpoint("tool_call", "Bash"))
	a.send("run")
	p := ev.pause(a.session)
	answer(t, c, p.GetKey(), stepd.CmdContinue())
	p = ev.pause(a.session)

	r := answer(t, c, p.GetKey(), stepd.CmdEval("turn"))
	if got := r.GetPause().GetDebugValue().GetText(); got != "1" {
		t.Errorf("EVAL turn: %q (%v)", got, r)
	}
	_, err := c.SendDebugInput(testContext(t), p.GetKey(), stepd.CmdEval("nonsense"))
	if err == nil {
		ev.waitFor("eval_error", func(e *stepdv1.Event) bool {
			return e.GetEvalError() != nil && strings.Contains(e.GetEvalError().String(), "nonsense")
		})
	}
	pauses, lerr := c.ListPauses(testContext(t), a.session)
	if lerr != nil || len(pauses) != 1 {
		t.Fatalf("the pause after a failed EVAL: %v %v (eval err %v)", pauses, lerr, err)
	}
	answer(t, c, p.GetKey(), stepd.CmdContinue())
	a.expect("done")
}

// The daemon's hold limit resolves a hold as CONTINUE.
func TestHoldLimit(t *testing.T) {
	d := startDaemon(t, "", "--hold-limit", "500ms")
	c := d.client(t)
	ev := subscribe(t, c)
	a := startAgent(t, d)
	arm(t, c, a, stepd.ProbeBreakpoint("tool_call", "Bash"))
	a.send("run")
	p := ev.pause(a.session)
	r := ev.waitFor("pause_resolved", func(e *stepdv1.Event) bool {
		return e.GetPauseResolved().GetKey() == p.GetKey()
	})
	if by := r.GetPauseResolved().GetBy(); by != "hold-limit" {
		t.Errorf("resolved by %q", by)
	}
	if got := a.expect("point tool_call Bash"); got != `point tool_call Bash value={"cmd":"ls","turn":0} err=nil` {
		t.Errorf("after the hold limit: %s", got)
	}
	a.expect("done")
}

// A probe killed while held: its pause resolves by "disconnect" and the
// session ends.
func TestProbeKilledWhileHeld(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	a := startAgent(t, d)
	arm(t, c, a, stepd.ProbeBreakpoint("tool_call", "Bash"))
	a.send("run")
	p := ev.pause(a.session)
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := ev.waitFor("pause_resolved", func(e *stepdv1.Event) bool {
		return e.GetPauseResolved().GetKey() == p.GetKey()
	})
	if by := r.GetPauseResolved().GetBy(); by != "disconnect" {
		t.Errorf("resolved by %q", by)
	}
	end := ev.waitFor("session_ended", func(e *stepdv1.Event) bool {
		return e.GetSessionId() == a.session && e.GetSessionEnded() != nil
	})
	if reason := end.GetSessionEnded().GetReason(); reason != stepdv1.EndReason_END_REASON_PROBE_DISCONNECTED {
		t.Errorf("end reason %v", reason)
	}
}

// An exception-only point holds only when there is an error, with its
// message as caught_msg; INJECT null clears the error.
func TestOnError(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	a := startAgent(t, d)
	arm(t, c, a, stepd.ProbeBreakpoint("error", ""))
	a.send("run")
	p := ev.pause(a.session)
	if p.GetReason() != stepdv1.PauseReason_PAUSE_REASON_EXCEPTION || p.GetCaughtMsg() != "boom" {
		t.Fatalf("pause %v %q", p.GetReason(), p.GetCaughtMsg())
	}
	answer(t, c, p.GetKey(), stepd.CmdInjectValue(structpb.NewNullValue()))
	if got := a.expect("point error final"); got != "point error final value=null err=nil" {
		t.Errorf("after INJECT null: %s", got)
	}
	a.expect("done")
}

// A condition evaluated by the library: only the matching point holds.
func TestConditionAndLabels(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	a := startAgent(t, d, "-turns", "3", "-labels", "agent=sub")
	// The label selector leaves the second breakpoint out of this probe's arming.
	armN(t, c, a, 1,
		stepd.ProbeBreakpoint("tool_call", "*", stepd.Condition(`value.turn == 2 && labels.agent == "sub"`)),
		stepd.ProbeBreakpoint("prompt", "", stepd.LabelSelector("agent=main")),
	)
	a.send("run")
	p := ev.pause(a.session)
	if p.GetPoint().GetName() != "Read" || !strings.Contains(p.GetDebugValue().GetText(), `"turn":2`) {
		t.Fatalf("held at %v %v", p.GetPoint(), p.GetDebugValue())
	}
	answer(t, c, p.GetKey(), stepd.CmdContinue())
	p = ev.pause(a.session)
	if p.GetPoint().GetName() != "Bash" || !strings.Contains(p.GetDebugValue().GetText(), `"turn":2`) {
		t.Fatalf("held at %v %v", p.GetPoint(), p.GetDebugValue())
	}
	answer(t, c, p.GetKey(), stepd.CmdContinue())
	a.expect("done")
}
