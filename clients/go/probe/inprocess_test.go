package probe_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
	"github.com/stepd-dev/stepd/clients/go/probe"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

func connect(t testing.TB, addr string, opts probe.Options) *probe.Probe {
	t.Helper()
	opts.Addr = addr
	if opts.Name == "" {
		opts.Name = "in-process"
	}
	p, err := probe.Connect(testContext(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.WaitConnected(testContext(t)); err != nil {
		t.Fatal(err)
	}
	return p
}

func waitArmed(t testing.TB, p *probe.Probe, n int) {
	t.Helper()
	deadline := time.Now().Add(deadline)
	for len(p.Armed().GetMatchers()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("not armed: %v", p.Armed())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Goroutines hold concurrently, each in its own scope stack; each answer
// goes to its own hold.
func TestConcurrentHolds(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	p := connect(t, d.addr, probe.Options{})
	if _, err := c.AddBreakpoint(testContext(t), stepd.ProbeBreakpoint("tool_call", "Bash")); err != nil {
		t.Fatal(err)
	}
	waitArmed(t, p, 1)

	const n = 4
	results := make([]any, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, end := p.Scope(context.Background(), fmt.Sprintf("worker%d", i))
			defer end()
			v, err := p.Hold(ctx, "tool_call", "Bash", map[string]any{"worker": i}, probe.TypeHint("dict"))
			if err != nil {
				t.Error(err)
			}
			results[i] = v
		}()
	}
	for range n {
		pause := ev.pause(p.SessionID())
		scope := pause.GetPoint().GetScopePath()
		if len(scope) != 1 {
			t.Fatalf("scope path %v", scope)
		}
		answer(t, c, pause.GetKey(), stepd.CmdInjectValue(structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			"answered": structpb.NewStringValue(scope[0]),
		}})))
	}
	wg.Wait()
	for i, r := range results {
		m, ok := r.(map[string]any)
		if !ok || m["answered"] != fmt.Sprintf("worker%d", i) {
			t.Errorf("worker %d got %v", i, r)
		}
	}
}

// HoldAs decodes a replacement into the caller's type.
func TestHoldAs(t *testing.T) {
	type args struct {
		Cmd string `json:"cmd"`
		N   int    `json:"n"`
	}
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	p := connect(t, d.addr, probe.Options{})
	if _, err := c.AddBreakpoint(testContext(t), stepd.ProbeBreakpoint("", "Bash", stepd.Condition("value.n > 1"))); err != nil {
		t.Fatal(err)
	}
	waitArmed(t, p, 1)
	// The condition is false: no hold.
	got, err := probe.HoldAs(context.Background(), p, "tool_call", "Bash", args{"ls", 1}, probe.Schema(map[string]any{
		"type": "object", "required": []any{"cmd"},
	}))
	if err != nil || got != (args{"ls", 1}) {
		t.Fatal(got, err)
	}
	done := make(chan args, 1)
	go func() {
		got, err := probe.HoldAs(context.Background(), p, "tool_call", "Bash", args{"ls", 2}, probe.Schema(map[string]any{
			"type": "object", "required": []any{"cmd"},
		}))
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	pause := ev.pause(p.SessionID())
	// Missing "cmd": refused by the schema.
	_, err = c.SendDebugInput(testContext(t), pause.GetKey(), stepd.CmdInjectValue(mustValue(t, map[string]any{"n": 3})))
	if !errors.Is(err, stepd.ErrInvalidValue) {
		t.Fatalf("INJECT against the schema: %v", err)
	}
	answer(t, c, pause.GetKey(), stepd.CmdInjectCode(`{"cmd": "pwd", "n": 5}`))
	if got := <-done; got != (args{"pwd", 5}) {
		t.Errorf("HoldAs after INJECT: %+v", got)
	}
}

// A held point goes on when the daemon dies (with ReleaseOnDisconnect;
// by default it would wait and be re-reported); the probe reconnects to a
// daemon that comes back on the same address, and holds again.
func TestReconnect(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	p := connect(t, d.addr, probe.Options{ReleaseOnDisconnect: true})
	first := p.SessionID()
	if _, err := c.AddBreakpoint(testContext(t), stepd.ProbeBreakpoint("tool_call", "Bash")); err != nil {
		t.Fatal(err)
	}
	waitArmed(t, p, 1)
	held := make(chan error, 1)
	go func() {
		v, err := p.Hold(context.Background(), "tool_call", "Bash", "original", probe.Editable())
		if err == nil && v != "original" {
			err = fmt.Errorf("value %v", v)
		}
		held <- err
	}()
	ev.pause(first)
	// A crash, not a Shutdown (which answers held points with STOP).
	_ = d.cmd.Process.Kill()
	<-d.exited
	select {
	case err := <-held:
		if err != nil {
			t.Fatalf("released hold: %v", err)
		}
	case <-time.After(deadline):
		t.Fatal("the hold did not go on when the daemon went away")
	}
	// Disconnected once the stream has failed: points go on at once.
	for until := time.Now().Add(deadline); p.Connected(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(until) {
			t.Fatal("the probe still counts itself connected to a dead daemon")
		}
	}
	start := time.Now()
	if v, err := p.Hold(context.Background(), "tool_call", "Bash", 1); v != 1 || err != nil {
		t.Fatal(v, err)
	}
	// At once: waiting for a daemon would last the 60 s reconnect deadline.
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a hold while disconnected took %v", took)
	}

	d2 := startDaemon(t, d.addr)
	if err := p.WaitConnected(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if p.SessionID() == first {
		t.Logf("the daemon continued session %s", first)
	}
	c2 := d2.client(t)
	ev2 := subscribe(t, c2)
	if _, err := c2.AddBreakpoint(testContext(t), stepd.ProbeBreakpoint("tool_call", "Bash")); err != nil {
		t.Fatal(err)
	}
	waitArmed(t, p, 1)
	go func() {
		_, err := p.Hold(context.Background(), "tool_call", "Bash", "again")
		held <- err
	}()
	pause := ev2.pause(p.SessionID())
	answer(t, c2, pause.GetKey(), stepd.CmdQuit())
	if err := <-held; !errors.Is(err, probe.ErrStopped) {
		t.Errorf("after QUIT on the new daemon: %v", err)
	}
	// Before the daemon stops: it waits for open probe streams to drain.
	p.Close()
}

// Reports that overflow the buffer are dropped and counted, and the daemon
// reports the drop as a gap.
func TestReportDropsAreCounted(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	p := connect(t, d.addr, probe.Options{ReportBuffer: 8, FlushInterval: time.Hour})
	for i := range 100 {
		p.Observe(context.Background(), "web_source", "url", i)
	}
	if s := p.Stats(); s.ReportsDropped != 92 || s.ReportsPending != 8 {
		t.Fatalf("stats %+v", s)
	}
	p.Close() // flushes
	gap := ev.waitFor("a gap", func(e *stepdv1.Event) bool { return e.GetGap() != nil })
	t.Logf("gap: %v", gap.GetGap())
}

// A point observed before a hold reaches subscribers before the hold's
// pause, however long the flush interval: the Hit never overtakes the
// reports buffered ahead of it.
func TestObservedBeforeHoldArrivesFirst(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	p := connect(t, d.addr, probe.Options{FlushInterval: time.Hour})
	if _, err := c.AddBreakpoint(testContext(t), stepd.ProbeBreakpoint("tool_call", "Bash")); err != nil {
		t.Fatal(err)
	}
	waitArmed(t, p, 1)
	held := make(chan error, 1)
	go func() {
		p.Observe(context.Background(), "web_source", "url", "before")
		_, err := p.Hold(context.Background(), "tool_call", "Bash", "ls")
		held <- err
	}()
	first := ev.waitFor("the observed point or the pause", func(e *stepdv1.Event) bool {
		return e.GetSessionId() == p.SessionID() && (e.GetObserved() != nil || e.GetStopped().GetPause() != nil)
	})
	if first.GetObserved() == nil {
		t.Fatalf("the pause came before the point observed ahead of it: %v", first)
	}
	pause := ev.pause(p.SessionID())
	answer(t, c, pause.GetKey(), stepd.CmdContinue())
	if err := <-held; err != nil {
		t.Fatal(err)
	}
}
