package stepd_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

// fixture is a debuggee under tests/fixtures and the line of a marker in it.
func fixture(t testing.TB, relative, marker string) (string, uint32) {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "tests", "fixtures", relative)
	if marker == "" {
		return path, 0
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(data), "\n") {
		if _, rest, ok := strings.Cut(line, "LINE: "); ok && strings.Fields(rest)[0] == marker {
			return path, uint32(i + 1)
		}
	}
	t.Fatalf("no marker %q in %s", marker, path)
	return "", 0
}

// The session handle drives a real debugpy session from its first
// breakpoint to the program's exit: locals, eval, step, continue, output,
// and WaitForPause failing once the program has exited.
func TestSessionHandleDrivesADebuggeeToItsEnd(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	c := d.dial(t)
	ctx := testContext(t)
	program, stepLine := fixture(t, "python/loop.py", "step")
	_, returnLine := fixture(t, "python/loop.py", "step_return")
	bp, err := c.AddBreakpoint(ctx, stepd.SourceBreakpoint(program, stepLine))
	if err != nil {
		t.Fatal(err)
	}

	s, err := c.LaunchSession(ctx, &stepdv1.LaunchRequest{Adapter: "debugpy", Program: program})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	defer s.Close()
	if s.ID() == "" || s.Info().GetProgram() == "" {
		t.Fatalf("session %v", s.Info())
	}

	p, err := s.WaitForPause(ctx)
	if err != nil {
		t.Fatalf("WaitForPause: %v", err)
	}
	if p.GetReason() != stepdv1.PauseReason_PAUSE_REASON_BREAKPOINT || p.GetLocation().GetLine() != stepLine {
		t.Fatalf("paused %v at %v", p.GetReason(), p.GetLocation())
	}
	locals, err := s.Locals(ctx)
	if err != nil {
		t.Fatalf("locals: %v", err)
	}
	values := map[string]string{}
	for _, v := range locals {
		values[v.GetName()] = v.GetValue()
	}
	for _, name := range []string{"i", "total", "info", "items"} {
		if _, ok := values[name]; !ok {
			t.Errorf("no local %s in %v", name, values)
		}
	}
	if values["i"] != "0" {
		t.Errorf("i = %q, want 0", values["i"])
	}
	if v, err := s.Eval(ctx, "i + 100"); err != nil || v.GetValue() != "100" {
		t.Errorf("eval: %v %v", v, err)
	}

	st, err := s.Step(ctx, stepdv1.StepKind_STEP_KIND_OVER)
	if err != nil {
		t.Fatalf("step: %v", err)
	}
	if st.GetStopReason() != stepdv1.PauseReason_PAUSE_REASON_STEP || st.GetTopFrame().GetLocation().GetLine() != returnLine {
		t.Fatalf("after the step: %v", st)
	}
	st, err = s.Continue(ctx)
	if err != nil {
		t.Fatalf("continue: %v", err)
	}
	if st.GetStopReason() != stepdv1.PauseReason_PAUSE_REASON_BREAKPOINT {
		t.Fatalf("after continue: %v", st)
	}
	if v, err := s.Eval(ctx, "i"); err != nil || v.GetValue() != "1" {
		t.Errorf("second hit: i = %v %v", v, err)
	}

	if _, err := c.RemoveBreakpoint(ctx, bp.GetId()); err != nil {
		t.Fatal(err)
	}
	st, err = s.Continue(ctx)
	if err != nil {
		t.Fatalf("continue to the end: %v", err)
	}
	if st.GetState() != stepdv1.SessionState_SESSION_STATE_ENDED || st.GetEndReason() != stepdv1.EndReason_END_REASON_EXITED || st.GetExitCode() != 0 {
		t.Fatalf("the program did not exit: %v", st)
	}
	out, err := s.Output(ctx, "stdout")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "i=0 total=0\n") || !strings.Contains(out, "done total=20\n") {
		t.Errorf("output %q", out)
	}

	var se *stepd.Error
	if _, err := s.WaitForPause(ctx); !errors.As(err, &se) || !errors.Is(err, stepd.ErrSessionEnded) {
		t.Fatalf("WaitForPause after the exit: %v, want SESSION_ENDED", err)
	}
	if se.Metadata["end_reason"] != "END_REASON_EXITED" || se.Metadata["exit_code"] != "0" {
		t.Errorf("metadata %v", se.Metadata)
	}
	if err := s.Close(); err != nil {
		t.Errorf("closing an ended session: %v", err)
	}
}

// Close ends the session and its debuggee: the process is gone afterwards.
func TestSessionCloseLeavesNoDebuggee(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	c := d.dial(t)
	ctx := testContext(t)
	program, _ := fixture(t, "python/busy.py", "")

	s, err := c.LaunchSession(ctx, &stepdv1.LaunchRequest{Adapter: "debugpy", Program: program})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	st, err := s.Pause(ctx)
	if err != nil {
		t.Fatalf("pause: %v", err)
	}
	if st.GetState() != stepdv1.SessionState_SESSION_STATE_STOPPED {
		t.Fatalf("after pause: %v", st)
	}
	v, err := s.Eval(ctx, "__import__('os').getpid()")
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(v.GetValue())
	if err != nil {
		t.Fatalf("pid %q: %v", v.GetValue(), err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "busy.py") {
		t.Fatalf("pid %d is not the debuggee: %q %v", pid, cmdline, err)
	}
	// A pidfd becomes readable when the process exits.
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)

	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 20_000)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n != 1 {
			t.Fatalf("the debuggee %d still runs after Close (%d, %v)", pid, n, err)
		}
		break
	}
	got, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetSession().GetState() != stepdv1.SessionState_SESSION_STATE_ENDED || got.GetSession().GetEndReason() != stepdv1.EndReason_END_REASON_TERMINATED {
		t.Errorf("after Close: %v", got.GetSession())
	}
	if live, err := c.ListSessions(ctx, nil); err != nil || slices.ContainsFunc(live, func(x *stepdv1.Session) bool { return x.GetId() == s.ID() }) {
		t.Errorf("still listed as live: %v %v", live, err)
	}
}
