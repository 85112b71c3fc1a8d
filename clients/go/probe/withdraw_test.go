package probe_test

import (
	"context"
	"errors"
	"testing"
	"time"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
	"github.com/stepd-dev/stepd/clients/go/probe"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

// A hold whose context ends is withdrawn: its pause resolves with by
// "withdrawn" and an answer sent afterwards fails instead of pretending to
// reach the program.
func TestCancelledHoldIsWithdrawn(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	p := connect(t, d.addr, probe.Options{})
	if _, err := c.AddBreakpoint(testContext(t), stepd.ProbeBreakpoint("tool_call", "Bash")); err != nil {
		t.Fatal(err)
	}
	waitArmed(t, p, 1)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := p.Hold(ctx, "tool_call", "Bash", map[string]any{"cmd": "sleep"})
		done <- err
	}()
	pause := ev.pause(p.SessionID())
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Hold after its context ended: %v", err)
		}
	case <-time.After(deadline):
		t.Fatal("Hold did not return when its context ended")
	}
	resolved := ev.waitFor("pause_resolved", func(e *stepdv1.Event) bool {
		return e.GetPauseResolved().GetKey() == pause.GetKey()
	}).GetPauseResolved()
	if resolved.GetBy() != "withdrawn" || resolved.GetCommand() != stepdv1.CommandKind_COMMAND_KIND_UNSPECIFIED {
		t.Fatalf("resolved %v, want by withdrawn with no command", resolved)
	}
	_, err := c.SendDebugInput(testContext(t), pause.GetKey(), stepd.CmdContinue())
	if !errors.Is(err, stepd.ErrAlreadyAnswered) && !errors.Is(err, stepd.ErrPauseNotFound) {
		t.Fatalf("an answer after the withdrawal: %v", err)
	}
	pauses, err := c.ListPauses(testContext(t), p.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	if len(pauses) != 0 {
		t.Fatalf("pauses left after the withdrawal: %v", pauses)
	}

	// The probe goes on holding and being answered as before.
	go func() {
		_, err := p.Hold(context.Background(), "tool_call", "Bash", 2)
		done <- err
	}()
	answer(t, c, newPause(ev, p.SessionID(), "Bash").GetKey(), stepd.CmdContinue())
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A per-hold Evaluator offers and serves EVAL even when Options.Eval is nil;
// a hold without one offers no EVAL.
func TestPerHoldEvaluator(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	p := connect(t, d.addr, probe.Options{})
	if _, err := c.AddBreakpoint(testContext(t), stepd.ProbeBreakpoint("tool_call", "")); err != nil {
		t.Fatal(err)
	}
	waitArmed(t, p, 1)
	offersEval := func(pause *stepdv1.Pause) bool {
		for _, k := range pause.GetInputType() {
			if k == stepdv1.CommandKind_COMMAND_KIND_EVAL {
				return true
			}
		}
		return false
	}

	done := make(chan error, 1)
	go func() {
		secret := "in the closure"
		_, err := p.Hold(context.Background(), "tool_call", "Bash", 1, probe.Evaluator(func(code string) (string, error) {
			return code + " = " + secret, nil
		}))
		done <- err
	}()
	pause := newPause(ev, p.SessionID(), "Bash")
	if !offersEval(pause) {
		t.Fatalf("a hold with its own evaluator does not offer EVAL: %v", pause.GetInputType())
	}
	r := answer(t, c, pause.GetKey(), stepd.CmdEval("x"))
	if got := r.GetPause().GetDebugValue().GetText(); got != "x = in the closure" {
		t.Fatalf("EVAL at the hold: %q", got)
	}
	answer(t, c, pause.GetKey(), stepd.CmdContinue())
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	go func() {
		_, err := p.Hold(context.Background(), "tool_call", "Read", 2)
		done <- err
	}()
	pause = newPause(ev, p.SessionID(), "Read")
	if offersEval(pause) {
		t.Fatalf("a hold without an evaluator offers EVAL: %v", pause.GetInputType())
	}
	answer(t, c, pause.GetKey(), stepd.CmdContinue())
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// newPause waits for a new pause (not a re-sent one) of session at a point named name.
func newPause(ev *events, session, name string) *stepdv1.Pause {
	ev.t.Helper()
	return ev.waitFor("a pause at "+name, func(e *stepdv1.Event) bool {
		pause := e.GetStopped().GetPause()
		return e.GetSessionId() == session && pause != nil && pause.GetRevision() == 0 && pause.GetPoint().GetName() == name
	}).GetStopped().GetPause()
}
