package stepd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

func TestPingHandshake(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	c := d.dial(t)
	ctx := testContext(t)

	ping, err := c.Ping(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ping.GetProtocolVersion() != stepd.ProtocolVersion {
		t.Errorf("protocol_version = %q, want %q", ping.GetProtocolVersion(), stepd.ProtocolVersion)
	}
	if ping.GetVersion() == "" || ping.GetInstanceId() == "" {
		t.Errorf("ping lacks version or instance id: %v", ping)
	}
	if ping.GetUptime() == nil || ping.GetServerTime() == nil {
		t.Errorf("ping lacks uptime or server time: %v", ping)
	}

	status, err := c.GetStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status.GetInstanceId() != ping.GetInstanceId() {
		t.Errorf("status instance %q != ping instance %q", status.GetInstanceId(), ping.GetInstanceId())
	}
	if status.GetVersion() != ping.GetVersion() {
		t.Errorf("status version %q != ping version %q", status.GetVersion(), ping.GetVersion())
	}

	version, err := c.GetVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if version.GetVersion() != ping.GetVersion() || version.GetProtocolVersion() != stepd.ProtocolVersion {
		t.Errorf("GetVersion = %v, want version %q protocol %q", version, ping.GetVersion(), stepd.ProtocolVersion)
	}

	doctor, err := c.Doctor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if doctor.GetStore().GetStatus() != stepdv1.CheckStatus_CHECK_STATUS_OK {
		t.Errorf("doctor store = %v, want OK", doctor.GetStore())
	}
}

func TestDialUnixSocketAndDefaultAddress(t *testing.T) {
	d := startDaemon(t, daemonConfig{unixSocket: true})
	if d.unix == "" {
		t.Fatal("ready line names no unix socket")
	}
	ctx := testContext(t)

	viaUnix, err := stepd.Dial(ctx, "unix:"+d.unix)
	if err != nil {
		t.Fatal(err)
	}
	defer viaUnix.Close()
	p1, err := viaUnix.Ping(ctx)
	if err != nil {
		t.Fatalf("ping over the unix socket: %v", err)
	}

	t.Setenv("STEPD_ADDR", d.addr)
	viaEnv, err := stepd.Dial(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer viaEnv.Close()
	p2, err := viaEnv.Ping(ctx)
	if err != nil {
		t.Fatalf("ping at $STEPD_ADDR: %v", err)
	}
	if p1.GetInstanceId() != p2.GetInstanceId() {
		t.Errorf("unix socket and tcp reach different daemons: %q vs %q", p1.GetInstanceId(), p2.GetInstanceId())
	}
}

func TestBreakpointLifecycle(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	c := d.dial(t)
	ctx := testContext(t)

	src, err := c.AddBreakpoint(ctx, stepd.SourceBreakpoint("/src/app/main.py", 12, stepd.Condition("x > 1"), stepd.HitCondition(">=2")))
	if err != nil {
		t.Fatal(err)
	}
	if src.GetId() == "" || !src.GetSpec().GetEnabled() {
		t.Errorf("added breakpoint: want an id and enabled by default, got %v", src)
	}
	if got := src.GetSpec().GetSource(); got.GetPath() != "/src/app/main.py" || got.GetLine() != 12 {
		t.Errorf("source location = %v", got)
	}
	fn, err := c.AddBreakpoint(ctx, stepd.FunctionBreakpoint("main.run", stepd.Enabled(false)))
	if err != nil {
		t.Fatal(err)
	}
	if fn.GetSpec().GetEnabled() {
		t.Errorf("function breakpoint added disabled, stored enabled: %v", fn)
	}
	probe, err := c.AddBreakpoint(ctx, stepd.ProbeBreakpoint("tool_call", "Bash*", stepd.LabelSelector("env=ci")))
	if err != nil {
		t.Fatal(err)
	}

	list, err := c.ListBreakpoints(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ids := breakpointIDs(list); !equal(ids, []string{src.GetId(), fn.GetId(), probe.GetId()}) {
		t.Fatalf("list = %v, want creation order %v", ids, []string{src.GetId(), fn.GetId(), probe.GetId()})
	}

	// Only "enabled" changes; the condition stays.
	updated, err := c.UpdateBreakpoint(ctx, src.GetId(), &stepdv1.BreakpointSpec{Enabled: new(false), Condition: "ignored"}, "enabled")
	if err != nil {
		t.Fatal(err)
	}
	if updated.GetSpec().GetEnabled() {
		t.Errorf("after update enabled=false: %v", updated)
	}
	if updated.GetSpec().GetCondition() != "x > 1" || updated.GetSpec().GetHitCondition() != ">=2" {
		t.Errorf("update with mask [enabled] changed other fields: %v", updated.GetSpec())
	}
	reenabled, err := c.SetBreakpointEnabled(ctx, src.GetId(), true)
	if err != nil {
		t.Fatal(err)
	}
	if !reenabled.GetSpec().GetEnabled() || reenabled.GetId() != src.GetId() {
		t.Errorf("SetBreakpointEnabled(true) = %v", reenabled)
	}

	removed, err := c.RemoveBreakpoint(ctx, fn.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if removed.GetId() != fn.GetId() {
		t.Errorf("removed %q, want %q", removed.GetId(), fn.GetId())
	}
	list, err = c.ListBreakpoints(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ids := breakpointIDs(list); !equal(ids, []string{src.GetId(), probe.GetId()}) {
		t.Errorf("after remove: %v", ids)
	}
	// The label selector filters the list.
	forLabels, err := c.ListBreakpoints(ctx, map[string]string{"env": "prod"})
	if err != nil {
		t.Fatal(err)
	}
	if ids := breakpointIDs(forLabels); !equal(ids, []string{src.GetId()}) {
		t.Errorf("ListBreakpoints(env=prod) = %v, want only %v", ids, src.GetId())
	}

	if _, err := c.RemoveBreakpoint(ctx, fn.GetId()); !errors.Is(err, stepd.ErrBreakpointNotFound) {
		t.Errorf("second remove: %v, want ErrBreakpointNotFound", err)
	}
}

// TestErrors drives every error reason the daemon can produce today and
// checks it arrives as a typed *stepd.Error.
func TestErrors(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	c := d.dial(t)
	ctx := testContext(t)

	cases := []struct {
		name     string
		call     func() error
		sentinel error
		code     codes.Code
	}{
		{"invalid argument", func() error {
			_, err := c.AddBreakpoint(ctx, stepd.SourceBreakpoint("", 0))
			return err
		}, stepd.ErrInvalidArgument, codes.InvalidArgument},
		{"breakpoint not found", func() error {
			_, err := c.UpdateBreakpoint(ctx, "bp-999999", &stepdv1.BreakpointSpec{Enabled: new(true)}, "enabled")
			return err
		}, stepd.ErrBreakpointNotFound, codes.NotFound},
		{"pause not found", func() error {
			_, err := c.SendDebugInput(ctx, "no-such-pause", stepd.CmdContinue())
			return err
		}, stepd.ErrPauseNotFound, codes.NotFound},
		{"session not found", func() error {
			_, err := c.GetSession(ctx, "01900000-0000-7000-8000-000000000000")
			return err
		}, stepd.ErrSessionNotFound, codes.NotFound},
		{"inspector not found", func() error {
			_, err := c.Inspector().Clear(ctx, &stepdv1.ClearRequest{InspectorId: "no-such-inspector"})
			return stepd.FromError(err)
		}, stepd.ErrInspectorNotFound, codes.NotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil {
				t.Fatal("call succeeded, want an error")
			}
			var se *stepd.Error
			if !errors.As(err, &se) {
				t.Fatalf("%T %v is not a *stepd.Error", err, err)
			}
			if !errors.Is(err, tc.sentinel) {
				t.Errorf("errors.Is(%v, %v) = false", err, tc.sentinel)
			}
			if errors.Is(err, stepd.ErrInternal) {
				t.Errorf("%v also matches ErrInternal", err)
			}
			if se.Code != tc.code || status.Code(err) != tc.code {
				t.Errorf("code = %v (status.Code %v), want %v", se.Code, status.Code(err), tc.code)
			}
			if se.ReasonName != stepd.ReasonName(se.Reason) || se.Message == "" {
				t.Errorf("reason name %q, reason %v, message %q", se.ReasonName, se.Reason, se.Message)
			}
		})
	}

	t.Run("field violations", func(t *testing.T) {
		_, err := c.AddBreakpoint(ctx, stepd.SourceBreakpoint("/src/app/main.py", 0))
		var se *stepd.Error
		if !errors.As(err, &se) || se.Reason != stepdv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT {
			t.Fatalf("line 0: %v, want INVALID_ARGUMENT", err)
		}
		if len(se.FieldViolations) == 0 {
			t.Fatalf("no field violations in %v", se)
		}
		v := se.FieldViolations[0]
		if v.Description == "" || !strings.Contains(v.Field, "line") {
			t.Errorf("violation = %+v, want one naming the line field", v)
		}
		if se.Metadata["field"] != v.Field {
			t.Errorf("metadata field = %q, want %q", se.Metadata["field"], v.Field)
		}
	})

	t.Run("metadata", func(t *testing.T) {
		_, err := c.Inspector().Clear(ctx, &stepdv1.ClearRequest{InspectorId: "no-such-inspector"})
		err = stepd.FromError(err)
		var se *stepd.Error
		if !errors.As(err, &se) {
			t.Fatal(err)
		}
		if se.Metadata["inspector_id"] != "no-such-inspector" {
			t.Errorf("INSPECTOR_NOT_FOUND metadata lacks the id: %v", se.Metadata)
		}
	})

	t.Run("context deadline", func(t *testing.T) {
		expired, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
		defer cancel()
		_, err := c.Ping(expired)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("ping with an expired context: %v, want context.DeadlineExceeded", err)
		}
	})
}

func TestLimitExceededSubscribers(t *testing.T) {
	d := startDaemon(t, daemonConfig{extraArgs: []string{"--max-subscribers", "1"}})
	c := d.dial(t)
	ctx := testContext(t)

	first, err := c.Subscribe(ctx, stepd.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := c.Subscribe(ctx, stepd.WatchOptions{})
	if err == nil {
		second.Close()
		t.Fatal("second subscription accepted with --max-subscribers 1")
	}
	if !errors.Is(err, stepd.ErrLimitExceeded) {
		t.Fatalf("second subscription: %v, want ErrLimitExceeded", err)
	}
	var se *stepd.Error
	if errors.As(err, &se) && se.Code != codes.ResourceExhausted {
		t.Errorf("code = %v, want ResourceExhausted", se.Code)
	}
	// The first one still works.
	if _, err := c.AddBreakpoint(ctx, stepd.FunctionBreakpoint("main")); err != nil {
		t.Fatal(err)
	}
	expectSnapshot(t, first)
	ev := nextEvent(t, first)
	if ev.GetBreakpointUpdated().GetChange() != stepdv1.BreakpointChange_BREAKPOINT_CHANGE_ADDED {
		t.Errorf("first subscription got %v, want breakpoint added", ev)
	}
}

func breakpointIDs(bps []*stepdv1.Breakpoint) []string {
	ids := make([]string, 0, len(bps))
	for _, bp := range bps {
		ids = append(ids, bp.GetId())
	}
	return ids
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
