package stepd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

const eventTimeout = 15 * time.Second

// nextEvent is the next event that is not a heartbeat, within eventTimeout.
func nextEvent(t testing.TB, sub *stepd.Subscription) *stepdv1.Event {
	t.Helper()
	deadline := time.NewTimer(eventTimeout)
	defer deadline.Stop()
	for {
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				t.Fatalf("subscription ended: %v", sub.Err())
			}
			if ev.GetHeartbeat() != nil {
				continue
			}
			return ev
		case <-deadline.C:
			t.Fatalf("no event within %v", eventTimeout)
		}
	}
}

func expectSnapshot(t testing.TB, sub *stepd.Subscription) *stepdv1.Snapshot {
	t.Helper()
	ev := nextEvent(t, sub)
	snap := ev.GetSnapshot()
	if snap == nil {
		t.Fatalf("got %v, want a snapshot", ev)
	}
	return snap
}

// expectBreakpointEvent is the next event, which must be breakpoint_updated
// with this change of this breakpoint.
func expectBreakpointEvent(t testing.TB, sub *stepd.Subscription, change stepdv1.BreakpointChange, id string) *stepdv1.Event {
	t.Helper()
	ev := nextEvent(t, sub)
	bu := ev.GetBreakpointUpdated()
	if bu == nil || bu.GetChange() != change || bu.GetBreakpoint().GetId() != id {
		t.Fatalf("got %v, want breakpoint_updated %v of %s", ev, change, id)
	}
	if ev.GetSeq() == 0 || ev.GetSessionId() != "" {
		t.Fatalf("breakpoint list event with seq %d, session %q", ev.GetSeq(), ev.GetSessionId())
	}
	return ev
}

func TestSubscribeSnapshotThenLiveEvents(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	c := d.dial(t)
	ctx := testContext(t)

	before, err := c.AddBreakpoint(ctx, stepd.SourceBreakpoint("/src/a.py", 3))
	if err != nil {
		t.Fatal(err)
	}
	ping, err := c.Ping(ctx)
	if err != nil {
		t.Fatal(err)
	}

	sub, err := c.Subscribe(ctx, stepd.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	snap := expectSnapshot(t, sub)
	if snap.GetInstanceId() != ping.GetInstanceId() {
		t.Errorf("snapshot instance %q, daemon %q", snap.GetInstanceId(), ping.GetInstanceId())
	}
	if snap.GetSeq() == 0 {
		t.Errorf("snapshot seq 0 after an event was published")
	}
	if ids := breakpointIDs(snap.GetBreakpoints()); !equal(ids, []string{before.GetId()}) {
		t.Errorf("snapshot breakpoints = %v, want [%s]", ids, before.GetId())
	}
	if seq, inst := sub.Cursor(); seq != snap.GetSeq() || inst != snap.GetInstanceId() {
		t.Errorf("cursor = %d %q, want the snapshot's %d %q", seq, inst, snap.GetSeq(), snap.GetInstanceId())
	}

	added, err := c.AddBreakpoint(ctx, stepd.FunctionBreakpoint("handler"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetBreakpointEnabled(ctx, added.GetId(), false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RemoveBreakpoint(ctx, before.GetId()); err != nil {
		t.Fatal(err)
	}

	e1 := expectBreakpointEvent(t, sub, stepdv1.BreakpointChange_BREAKPOINT_CHANGE_ADDED, added.GetId())
	e2 := expectBreakpointEvent(t, sub, stepdv1.BreakpointChange_BREAKPOINT_CHANGE_UPDATED, added.GetId())
	if e2.GetBreakpointUpdated().GetBreakpoint().GetSpec().GetEnabled() {
		t.Errorf("update event shows the breakpoint enabled: %v", e2)
	}
	e3 := expectBreakpointEvent(t, sub, stepdv1.BreakpointChange_BREAKPOINT_CHANGE_REMOVED, before.GetId())
	if !(snap.GetSeq() < e1.GetSeq() && e1.GetSeq() < e2.GetSeq() && e2.GetSeq() < e3.GetSeq()) {
		t.Errorf("seqs not increasing: snapshot %d, events %d %d %d", snap.GetSeq(), e1.GetSeq(), e2.GetSeq(), e3.GetSeq())
	}
	if seq, _ := sub.Cursor(); seq != e3.GetSeq() {
		t.Errorf("cursor = %d, want %d", seq, e3.GetSeq())
	}
}

func TestDebugInputOnTheStream(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	c := d.dial(t, stepd.WithClientName("go-test"))
	ctx := testContext(t)

	sub, err := c.Subscribe(ctx, stepd.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	snap := expectSnapshot(t, sub)
	if err := sub.SendDebugInput("no-such-pause", stepd.CmdNext()); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, sub)
	se := ev.GetError()
	if se == nil {
		t.Fatalf("got %v, want an error event", ev)
	}
	if ev.GetSeq() != 0 {
		t.Errorf("stream-local error event has seq %d", ev.GetSeq())
	}
	err = stepd.StreamErrorToError(se)
	if !errors.Is(err, stepd.ErrPauseNotFound) {
		t.Errorf("error event %v is not ErrPauseNotFound", err)
	}
	var typed *stepd.Error
	if !errors.As(err, &typed) || typed.Code != codes.NotFound || typed.Metadata["key"] != "no-such-pause" {
		t.Errorf("typed error = %+v, want NOT_FOUND naming the key", typed)
	}
	if seq, _ := sub.Cursor(); seq != snap.GetSeq() {
		t.Errorf("a stream-local event moved the cursor from %d to %d", snap.GetSeq(), seq)
	}
}

// TestResumeAfterConnectionLoss cuts the subscription's TCP connection twice;
// the events published while it was gone must arrive once each, in order,
// replayed by the daemon (no gap, no second snapshot).
func TestResumeAfterConnectionLoss(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	proxy := startProxy(t, d.addr)
	direct := d.dial(t)
	ctx := testContext(t)

	viaProxy, err := stepd.Dial(ctx, proxy.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer viaProxy.Close()
	sub, err := viaProxy.Subscribe(ctx, stepd.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	snap := expectSnapshot(t, sub)

	var want []string // "change id" in publication order
	var got []*stepdv1.Event
	add := func(name string) {
		t.Helper()
		bp, err := direct.AddBreakpoint(ctx, stepd.FunctionBreakpoint(name))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, "ADDED "+bp.GetId())
	}
	disable := func(id string) {
		t.Helper()
		if _, err := direct.SetBreakpointEnabled(ctx, id, false); err != nil {
			t.Fatal(err)
		}
		want = append(want, "UPDATED "+id)
	}
	receive := func(n int) {
		t.Helper()
		for range n {
			ev := nextEvent(t, sub)
			if ev.GetBreakpointUpdated() == nil {
				t.Fatalf("got %v, want only breakpoint events (no gap, no snapshot)", ev)
			}
			got = append(got, ev)
		}
	}

	add("before_cut_1")
	add("before_cut_2")
	receive(2)

	for round := 1; round <= 2; round++ {
		proxy.cut()
		add(fmt.Sprintf("during_cut_%d_a", round))
		disable(idOf(want[len(want)-1]))
		add(fmt.Sprintf("during_cut_%d_b", round))
		proxy.restore()
		receive(3)
		// Live events after the resume.
		add(fmt.Sprintf("after_cut_%d", round))
		receive(1)
		if sub.Reconnects() != round {
			t.Errorf("round %d: %d reconnects", round, sub.Reconnects())
		}
	}

	var gotKeys []string
	last := snap.GetSeq()
	for _, ev := range got {
		bu := ev.GetBreakpointUpdated()
		gotKeys = append(gotKeys, shortChange(bu.GetChange())+" "+bu.GetBreakpoint().GetId())
		if ev.GetSeq() <= last {
			t.Errorf("seq %d after %d: not strictly increasing", ev.GetSeq(), last)
		}
		last = ev.GetSeq()
	}
	if !equal(gotKeys, want) {
		t.Errorf("events received:\n  %v\nwant:\n  %v", gotKeys, want)
	}
	if n := sub.DuplicatesDropped(); n != 0 {
		t.Errorf("the daemon re-sent %d events already delivered", n)
	}
	if seq, inst := sub.Cursor(); seq != last || inst != snap.GetInstanceId() {
		t.Errorf("cursor %d %q, want %d %q", seq, inst, last, snap.GetInstanceId())
	}
	// Nothing else is pending: the next event is the one we publish now.
	add("final")
	receive(1)
	if key := shortChange(got[len(got)-1].GetBreakpointUpdated().GetChange()) + " " + got[len(got)-1].GetBreakpointUpdated().GetBreakpoint().GetId(); key != want[len(want)-1] {
		t.Errorf("last event %s, want %s", key, want[len(want)-1])
	}
}

// TestResumeAfterTheDaemonEndedAStreamLeftUnread: a consumer that stops
// reading has its stream ended by the daemon at --subscriber-buffer-bytes
// (LIMIT_EXCEEDED with resume_after_seq); the subscription resumes from its
// cursor and the consumer, reading again, gets every event once, in order.
func TestResumeAfterTheDaemonEndedAStreamLeftUnread(t *testing.T) {
	d := startDaemon(t, daemonConfig{extraArgs: []string{"--subscriber-buffer-bytes", "65536"}})
	c := d.dial(t)
	ctx := testContext(t)
	sub, err := c.Subscribe(ctx, stepd.WatchOptions{Buffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	expectSnapshot(t, sub)
	// Far more than the stream may hold, or the client's HTTP/2 windows take,
	// while nobody reads.
	var want []string
	condition := strings.Repeat("c", 4000)
	for i := range 600 {
		bp, err := c.AddBreakpoint(ctx, stepd.FunctionBreakpoint(fmt.Sprintf("f%d", i), stepd.Condition(condition)))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, bp.GetId())
	}
	var got []string
	for len(got) < len(want) {
		ev := nextEvent(t, sub)
		bu := ev.GetBreakpointUpdated()
		if bu == nil {
			t.Fatalf("got %v after %d events, want only breakpoint events (no gap)", ev, len(got))
		}
		got = append(got, bu.GetBreakpoint().GetId())
	}
	if !equal(got, want) {
		t.Errorf("events out of order or missing")
	}
	if sub.Reconnects() < 1 {
		t.Errorf("the daemon never ended the stream (%d reconnects)", sub.Reconnects())
	}
	if n := sub.DuplicatesDropped(); n != 0 {
		t.Errorf("%d events delivered twice", n)
	}
}

// TestResumeFromAnotherInstance: a cursor from another daemon instance takes
// the gap path: gap, then a fresh snapshot, after which the cursor belongs to
// the running daemon.
func TestResumeFromAnotherInstance(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	c := d.dial(t)
	ctx := testContext(t)

	bp, err := c.AddBreakpoint(ctx, stepd.FunctionBreakpoint("main"))
	if err != nil {
		t.Fatal(err)
	}
	ping, err := c.Ping(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, stepd.WatchOptions{ResumeAfterSeq: 1, ResumeInstanceID: "an-earlier-instance"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ev := nextEvent(t, sub)
	if ev.GetGap() == nil {
		t.Fatalf("got %v, want a gap", ev)
	}
	snap := expectSnapshot(t, sub)
	if snap.GetInstanceId() != ping.GetInstanceId() || !equal(breakpointIDs(snap.GetBreakpoints()), []string{bp.GetId()}) {
		t.Errorf("snapshot = %v", snap)
	}
	if seq, inst := sub.Cursor(); seq != snap.GetSeq() || inst != ping.GetInstanceId() {
		t.Errorf("cursor %d %q, want %d %q", seq, inst, snap.GetSeq(), ping.GetInstanceId())
	}
	second, err := c.AddBreakpoint(ctx, stepd.FunctionBreakpoint("second"))
	if err != nil {
		t.Fatal(err)
	}
	expectBreakpointEvent(t, sub, stepdv1.BreakpointChange_BREAKPOINT_CHANGE_ADDED, second.GetId())
}

// TestShutdownEndsSubscriptionCleanly: the daemon ends streams with OK on
// Shutdown; the subscription ends without an error and without reconnecting.
func TestShutdownEndsSubscriptionCleanly(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	c := d.dial(t)
	ctx := testContext(t)

	sub, err := c.Subscribe(ctx, stepd.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	expectSnapshot(t, sub)
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(eventTimeout)
	for {
		select {
		case _, ok := <-sub.Events():
			if ok {
				continue
			}
			if err := sub.Err(); err != nil {
				t.Errorf("subscription ended with %v, want a clean end", err)
			}
			if sub.Reconnects() != 0 {
				t.Errorf("%d reconnects after a clean end", sub.Reconnects())
			}
			select {
			case <-d.exited:
			case <-time.After(eventTimeout):
				t.Fatal("stepd did not exit after Shutdown")
			}
			return
		case <-deadline:
			t.Fatal("subscription still open after Shutdown")
		}
	}
}

func TestSubscriptionCloseAndContext(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	c := d.dial(t)
	ctx := testContext(t)

	sub, err := c.Subscribe(ctx, stepd.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expectSnapshot(t, sub)
	sub.Close()
	if _, ok := <-sub.Events(); ok {
		t.Error("events channel still open after Close")
	}
	if err := sub.Err(); err != nil {
		t.Errorf("Err after Close = %v", err)
	}
	if err := sub.SendDebugInput("k", stepd.CmdNext()); err == nil {
		t.Error("SendDebugInput on a closed subscription succeeded")
	}

	subCtx, cancel := context.WithCancel(ctx)
	sub2, err := c.Subscribe(subCtx, stepd.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expectSnapshot(t, sub2)
	cancel()
	select {
	case <-sub2.Done():
	case <-time.After(eventTimeout):
		t.Fatal("subscription still running after its context was cancelled")
	}
	if !errors.Is(sub2.Err(), context.Canceled) {
		t.Errorf("Err after cancel = %v, want context.Canceled", sub2.Err())
	}
}

func idOf(key string) string {
	_, id, _ := strings.Cut(key, " ")
	return id
}

func shortChange(c stepdv1.BreakpointChange) string {
	switch c {
	case stepdv1.BreakpointChange_BREAKPOINT_CHANGE_ADDED:
		return "ADDED"
	case stepdv1.BreakpointChange_BREAKPOINT_CHANGE_UPDATED:
		return "UPDATED"
	case stepdv1.BreakpointChange_BREAKPOINT_CHANGE_REMOVED:
		return "REMOVED"
	}
	return c.String()
}
