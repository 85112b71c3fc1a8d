package stepd_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
	"github.com/stepd-dev/stepd/clients/go/probe"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

// channelOf is the channel of a recorded event's payload (event.proto's EventChannel).
func channelOf(ev *stepdv1.Event) stepdv1.EventChannel {
	switch ev.GetPayload().(type) {
	case *stepdv1.Event_SessionStarted, *stepdv1.Event_SessionUpdated, *stepdv1.Event_SessionEnded, *stepdv1.Event_ThreadChanged:
		return stepdv1.EventChannel_EVENT_CHANNEL_LIFECYCLE
	case *stepdv1.Event_Stopped, *stepdv1.Event_Continued, *stepdv1.Event_PauseResolved, *stepdv1.Event_Stack, *stepdv1.Event_EvalError, *stepdv1.Event_Trace:
		return stepdv1.EventChannel_EVENT_CHANNEL_EXECUTION
	case *stepdv1.Event_Output:
		return stepdv1.EventChannel_EVENT_CHANNEL_OUTPUT
	case *stepdv1.Event_BreakpointUpdated:
		return stepdv1.EventChannel_EVENT_CHANNEL_BREAKPOINTS
	case *stepdv1.Event_Observed, *stepdv1.Event_Enlighten:
		return stepdv1.EventChannel_EVENT_CHANNEL_PROBE
	case *stepdv1.Event_Tap:
		return stepdv1.EventChannel_EVENT_CHANNEL_INSPECTOR
	case *stepdv1.Event_Notification:
		return stepdv1.EventChannel_EVENT_CHANNEL_NOTIFICATIONS
	}
	return stepdv1.EventChannel_EVENT_CHANNEL_UNSPECIFIED
}

// collect drains a history sequence, failing the test on an error.
func collect(t testing.TB, seq func(func(*stepdv1.Event, error) bool)) []*stepdv1.Event {
	t.Helper()
	var events []*stepdv1.Event
	for ev, err := range seq {
		if err != nil {
			t.Fatalf("history: %v", err)
		}
		events = append(events, ev)
	}
	return events
}

// sameEvents reports whether two event lists are equal, message by message.
func sameEvents(a, b []*stepdv1.Event) bool {
	return slices.EqualFunc(a, b, func(x, y *stepdv1.Event) bool { return proto.Equal(x, y) })
}

// kinds names each event's payload, for failure messages.
func kinds(events []*stepdv1.Event) []string {
	var out []string
	for _, ev := range events {
		m := ev.ProtoReflect()
		if f := m.WhichOneof(m.Descriptor().Oneofs().ByName("payload")); f != nil {
			out = append(out, string(f.Name()))
		}
	}
	return out
}

// recordedHistory reads a session's whole history once its last event is the
// session's end: events are recorded a little after they are published, and
// no event says when.
func recordedHistory(t testing.TB, c *stepd.Client, sessionID string) []*stepdv1.Event {
	t.Helper()
	ctx := testContext(t)
	deadline := time.Now().Add(eventTimeout)
	for {
		var events []*stepdv1.Event
		var failed error
		for ev, err := range c.SessionHistory(ctx, sessionID) {
			if err != nil {
				failed = err
				break
			}
			events = append(events, ev)
		}
		// Nothing of a new session may be recorded yet: not found until it is.
		if failed != nil && !errors.Is(failed, stepd.ErrSessionNotFound) {
			t.Fatalf("history: %v", failed)
		}
		if n := len(events); n > 0 && events[n-1].GetSessionEnded() != nil {
			return events
		}
		if time.Now().After(deadline) {
			t.Fatalf("the history never ended: %v", kinds(events))
		}
	}
}

// A probe session that held once (answered SKIP), reported a value and
// ended reads back exactly as a subscriber saw it: whole, a page of one at a
// time, and filtered by channel, from the client and from a Session handle.
func TestSessionHistoryOfAnEndedProbeSession(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	c := d.dial(t)
	ctx := testContext(t)
	sub, err := c.Subscribe(ctx, stepd.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	expectSnapshot(t, sub)

	p, err := probe.Connect(ctx, probe.Options{Addr: d.addr, Name: "history"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	session := p.SessionID()
	if _, err := c.AddBreakpoint(ctx, stepd.ProbeBreakpoint("tool_call", "Bash")); err != nil {
		t.Fatal(err)
	}

	var seen []*stepdv1.Event
	// next is the next event of the session, kept in seen.
	next := func() *stepdv1.Event {
		for {
			ev := nextEvent(t, sub)
			if ev.GetSessionId() == session {
				seen = append(seen, ev)
				return ev
			}
		}
	}
	// The probe learns of the breakpoint from the daemon; a point before that would not hold.
	armedBy := time.Now().Add(eventTimeout)
	for len(p.Armed().GetMatchers()) == 0 {
		if time.Now().After(armedBy) {
			t.Fatalf("the probe was never armed: %v", p.Armed())
		}
		time.Sleep(2 * time.Millisecond)
	}
	held := make(chan error, 1)
	go func() {
		_, err := p.Hold(ctx, "tool_call", "Bash", "rm -rf /tmp/x")
		held <- err
	}()
	var pause *stepdv1.Pause
	for pause == nil {
		pause = next().GetStopped().GetPause()
	}
	if _, err := c.SendDebugInput(ctx, pause.GetKey(), stepd.CmdSkip()); err != nil {
		t.Fatal(err)
	}
	if err := <-held; !errors.Is(err, probe.ErrSkipped) {
		t.Fatalf("the hold returned %v, want ErrSkipped", err)
	}
	p.Observe(ctx, "tick", "n", 7)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for next().GetSessionEnded() == nil {
	}

	whole := recordedHistory(t, c, session)
	if !sameEvents(whole, seen) {
		t.Fatalf("history %v, the subscriber saw %v", kinds(whole), kinds(seen))
	}
	if whole[0].GetSessionStarted() == nil {
		t.Errorf("the history starts with %v", kinds(whole[:1]))
	}
	if !slices.ContainsFunc(whole, func(ev *stepdv1.Event) bool { return ev.GetObserved().GetName() == "n" }) {
		t.Errorf("no observed report in %v", kinds(whole))
	}
	if !slices.ContainsFunc(whole, func(ev *stepdv1.Event) bool {
		return ev.GetPauseResolved().GetKey() == pause.GetKey() && ev.GetPauseResolved().GetBy() != ""
	}) {
		t.Errorf("the SKIP and who sent it are not in %v", kinds(whole))
	}

	one := collect(t, c.SessionHistory(ctx, session, stepd.HistoryPageSize(1)))
	if len(whole) < 3 || !sameEvents(one, whole) {
		t.Errorf("pages of one: %v, want %v", kinds(one), kinds(whole))
	}
	// Breaking out of the loop stops asking for pages.
	var first []*stepdv1.Event
	for ev, err := range c.SessionHistory(ctx, session, stepd.HistoryPageSize(1)) {
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, ev)
		break
	}
	if !sameEvents(first, whole[:1]) {
		t.Errorf("the first event alone: %v", kinds(first))
	}

	for _, channels := range [][]stepdv1.EventChannel{
		{stepdv1.EventChannel_EVENT_CHANNEL_LIFECYCLE},
		{stepdv1.EventChannel_EVENT_CHANNEL_EXECUTION, stepdv1.EventChannel_EVENT_CHANNEL_PROBE},
	} {
		var want []*stepdv1.Event
		for _, ev := range whole {
			if slices.Contains(channels, channelOf(ev)) {
				want = append(want, ev)
			}
		}
		got := collect(t, c.Session(session).History(ctx, stepd.HistoryChannels(channels...), stepd.HistoryPageSize(2)))
		if len(got) == 0 || !sameEvents(got, want) {
			t.Errorf("channels %v: %v, want %v", channels, kinds(got), kinds(want))
		}
	}
}

// An unknown session is ErrSessionNotFound (NOT_FOUND, with the id), yielded
// once, ending the sequence.
func TestSessionHistoryOfAnUnknownSession(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	c := d.dial(t)
	yielded := 0
	var got error
	for ev, err := range c.SessionHistory(testContext(t), "no-such-session") {
		yielded++
		if ev != nil {
			t.Errorf("an event %v with the error", ev)
		}
		got = err
	}
	var se *stepd.Error
	if yielded != 1 || !errors.Is(got, stepd.ErrSessionNotFound) || !errors.As(got, &se) {
		t.Fatalf("%d yields, last error %v; want one ErrSessionNotFound", yielded, got)
	}
	if se.Code != codes.NotFound || se.Metadata["session_id"] != "no-such-session" {
		t.Errorf("code %v, metadata %v", se.Code, se.Metadata)
	}
}

// Two probe sessions that ended are listed newest first, by labels and
// time, a page of one at a time as whole, each naming this daemon as its
// replica; a bad selector is ErrInvalidArgument.
func TestEndedSessions(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	c := d.dial(t)
	ctx := testContext(t)
	sub, err := c.Subscribe(ctx, stepd.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	expectSnapshot(t, sub)
	var ids []string
	for _, team := range []string{"a", "b"} {
		p, err := probe.Connect(ctx, probe.Options{Addr: d.addr, Name: "ended", Labels: map[string]string{"run": "ended", "team": team}})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WaitConnected(ctx); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.SessionID())
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		for ev := nextEvent(t, sub); ev.GetSessionId() != p.SessionID() || ev.GetSessionEnded() == nil; ev = nextEvent(t, sub) {
		}
	}
	// endedIDs lists the ids of the ended sessions opts select, failing on an error.
	endedIDs := func(opts ...stepd.EndedOption) ([]string, []*stepdv1.Session) {
		var got []string
		var sessions []*stepdv1.Session
		for s, err := range c.EndedSessions(ctx, opts...) {
			if err != nil {
				t.Fatalf("EndedSessions: %v", err)
			}
			got = append(got, s.GetId())
			sessions = append(sessions, s)
		}
		return got, sessions
	}
	// A session's record is written a little after it ends.
	newestFirst := []string{ids[1], ids[0]}
	deadline := time.Now().Add(eventTimeout)
	got, sessions := endedIDs(stepd.EndedLabels("run=ended"))
	for !slices.Equal(got, newestFirst) {
		if time.Now().After(deadline) {
			t.Fatalf("ended sessions %v, want %v", got, newestFirst)
		}
		time.Sleep(50 * time.Millisecond)
		got, sessions = endedIDs(stepd.EndedLabels("run=ended"))
	}
	ping, err := c.Ping(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sessions {
		if s.GetState() != stepdv1.SessionState_SESSION_STATE_ENDED || s.GetEndReason() != stepdv1.EndReason_END_REASON_PROBE_DISCONNECTED ||
			s.GetReplicaId() != ping.GetInstanceId() || s.GetEndedAt() == nil {
			t.Errorf("listed as %v", s)
		}
	}
	if got, _ := endedIDs(stepd.EndedLabels("run=ended"), stepd.EndedPageSize(1)); !slices.Equal(got, newestFirst) {
		t.Errorf("pages of one: %v, want %v", got, newestFirst)
	}
	if got, _ := endedIDs(stepd.EndedLabels("run=ended,team=a")); !slices.Equal(got, ids[:1]) {
		t.Errorf("team=a: %v, want %v", got, ids[:1])
	}
	last := sessions[0].GetEndedAt().AsTime()
	if got, _ := endedIDs(stepd.EndedLabels("run=ended"), stepd.EndedSince(last.Add(time.Second))); len(got) != 0 {
		t.Errorf("ended after the last end: %v", got)
	}
	first := sessions[1].GetStartedAt().AsTime()
	if got, _ := endedIDs(stepd.EndedLabels("run=ended"), stepd.EndedUntil(first.Add(-time.Second))); len(got) != 0 {
		t.Errorf("started before the first start: %v", got)
	}
	yielded := 0
	for s, err := range c.EndedSessions(ctx, stepd.EndedLabels("=nope")) {
		yielded++
		if s != nil || !errors.Is(err, stepd.ErrInvalidArgument) {
			t.Errorf("a bad selector gave %v, %v", s, err)
		}
	}
	if yielded != 1 {
		t.Errorf("a bad selector yielded %d times", yielded)
	}
}
