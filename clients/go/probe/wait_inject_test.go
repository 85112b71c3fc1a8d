package probe_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stepd-dev/stepd/clients/go/stepd"
)

// WaitForPause returns the hold of a real probe program, again while it is
// pending, gives up at its deadline, and fails with SESSION_ENDED when the
// program's session ends first (while waiting, and after the end).
func TestWaitForPauseWaitsForTheHoldAndFailsWhenTheSessionEnds(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	a := startAgent(t, d)
	arm(t, c, a, stepd.ProbeBreakpoint("prompt", "user"))
	s := c.Session(a.session)

	a.send("run")
	ctx, cancel := context.WithTimeout(testContext(t), deadline)
	defer cancel()
	p, err := s.WaitForPause(ctx)
	if err != nil {
		t.Fatalf("WaitForPause: %v", err)
	}
	if p.GetSessionId() != a.session || p.GetPoint().GetKind() != "prompt" || p.GetPoint().GetName() != "user" {
		t.Fatalf("pause %v", p)
	}
	// Still pending: the same pause, from the snapshot.
	again, err := c.WaitForPause(ctx, "")
	if err != nil || again.GetKey() != p.GetKey() {
		t.Fatalf("second WaitForPause: %v %v, want key %s", again.GetKey(), err, p.GetKey())
	}
	if _, err := s.Answer(ctx, p.GetKey(), stepd.CmdContinue()); err != nil {
		t.Fatal(err)
	}
	a.expect("done")

	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if p, err := s.WaitForPause(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no pause comes: got %v, %v; want the deadline", p, err)
	}

	waited := make(chan error, 1)
	go func() {
		_, err := s.WaitForPause(ctx)
		waited <- err
	}()
	// Quit only once the wait has subscribed, so the end comes as an event.
	for until := time.Now().Add(deadline); ; time.Sleep(5 * time.Millisecond) {
		st, err := c.GetStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.GetSubscribers() >= 1 {
			break
		}
		if time.Now().After(until) {
			t.Fatal("WaitForPause did not subscribe")
		}
	}
	a.send("quit")
	var err2 error
	select {
	case err2 = <-waited:
	case <-time.After(deadline):
		t.Fatal("WaitForPause did not return when the session ended")
	}
	var se *stepd.Error
	if !errors.Is(err2, stepd.ErrSessionEnded) || !errors.As(err2, &se) {
		t.Fatalf("the session ended: got %v, want SESSION_ENDED", err2)
	}
	if se.Metadata["session_id"] != a.session || se.Metadata["end_reason"] != "END_REASON_PROBE_DISCONNECTED" {
		t.Errorf("metadata %v", se.Metadata)
	}
	if _, err := s.WaitForPause(ctx); !errors.Is(err, stepd.ErrSessionEnded) {
		t.Errorf("after the end: %v, want SESSION_ENDED", err)
	}
	if _, err := c.WaitForPause(ctx, "no-such-session"); !errors.Is(err, stepd.ErrSessionNotFound) {
		t.Errorf("unknown session: %v, want SESSION_NOT_FOUND", err)
	}
}

// INJECT from plain Go values: the program goes on with a number, a map and a
// struct (decoded into its own type), exactly as sent.
func TestInjectGoValues(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	a := startAgent(t, d)
	arm(t, c, a,
		stepd.ProbeBreakpoint("prompt", "user"),
		stepd.ProbeBreakpoint("tool_call", "Read"),
		stepd.ProbeBreakpoint("tool_call", "Bash"))
	s := c.Session(a.session)
	ctx := testContext(t)
	a.send("run")

	type bashArgs struct {
		Cmd   string `json:"cmd"`
		Turn  int    `json:"turn"`
		Extra string `json:"extra,omitempty"`
	}
	for _, step := range []struct {
		point string
		value any
		want  string
	}{
		{"user", 42, `point prompt user value=42 err=nil`},
		{"Read", map[string]any{"path": "b", "lines": []int{1, 2}}, `point tool_call Read value={"lines":[1,2],"path":"b"} err=nil`},
		{"Bash", bashArgs{Cmd: "pwd", Turn: 9}, `point tool_call Bash value={"cmd":"pwd","turn":9} err=nil`},
	} {
		p, err := s.WaitForPause(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p.GetPoint().GetName() != step.point {
			t.Fatalf("held at %v, want %s", p.GetPoint(), step.point)
		}
		if _, err := s.Inject(ctx, p.GetKey(), step.value); err != nil {
			t.Fatalf("inject %v: %v", step.value, err)
		}
		if got := a.expect("point " + p.GetPoint().GetKind() + " " + step.point); got != step.want {
			t.Errorf("got %q, want %q", got, step.want)
		}
	}
	if got := a.expect("point tool_result Bash"); got != `point tool_result Bash value="ran pwd" err=nil` {
		t.Errorf("the program did not go on with the injected struct: %q", got)
	}
	a.expect("done")

	// JSON text as a json.RawMessage is the same value; what JSON cannot
	// encode fails before anything is sent.
	cmd, err := stepd.CmdInject(json.RawMessage(`{"n": 1}`))
	if err != nil || cmd.GetInject().GetValue().GetStructValue().GetFields()["n"].GetNumberValue() != 1 {
		t.Errorf("raw JSON: %v %v", cmd, err)
	}
	if _, err := stepd.CmdInject(make(chan int)); err == nil {
		t.Error("a channel was accepted")
	}
}
