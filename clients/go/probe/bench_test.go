package probe_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/baggage"

	"github.com/stepd-dev/stepd/clients/go/probe"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

// work is the instrumented function's own work, the same with and without
// the point.
//
//go:noinline
func work(args map[string]any) int {
	return len(strings.ToUpper(args["cmd"].(string)))
}

//go:noinline
func toolCall(ctx context.Context, args map[string]any) int {
	return work(args)
}

//go:noinline
func toolCallWithPoint(ctx context.Context, p *probe.Probe, args map[string]any) int {
	v, err := p.Hold(ctx, "tool_call", "Read", args, probe.Editable())
	if err != nil {
		return 0
	}
	return work(v.(map[string]any))
}

// BenchmarkUnarmedPoint: the cost of a point that does not hold, on a probe
// connected to a real daemon and armed with a breakpoint on another tool
// (so the matcher is consulted), inside two scopes.
func BenchmarkUnarmedPoint(b *testing.B) {
	d := startDaemon(b, "")
	c := d.client(b)
	p := connect(b, d.addr, probe.Options{Name: "bench"})
	if _, err := c.AddBreakpoint(testContext(b), stepd.ProbeBreakpoint("tool_call", "Bash", stepd.Condition(`value.cmd contains "rm"`))); err != nil {
		b.Fatal(err)
	}
	waitArmed(b, p, 1)
	ctx, end := p.Scope(context.Background(), "turn")
	defer end()
	ctx, end2 := p.Scope(ctx, "tool")
	defer end2()
	args := map[string]any{"cmd": "cat README.md"}

	b.Run("without", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			toolCall(ctx, args)
		}
	})
	b.Run("with", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			toolCallWithPoint(ctx, p, args)
		}
	})
	b.Run("with-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				toolCallWithPoint(ctx, p, args)
			}
		})
	})
	// Not unarmed: the name matches, so the condition is evaluated (the value
	// goes through encoding/json) before the point decides not to hold.
	b.Run("condition-false", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := p.Hold(ctx, "tool_call", "Bash", args); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("disconnected", func(b *testing.B) {
		var nilProbe *probe.Probe
		b.ReportAllocs()
		for b.Loop() {
			toolCallWithPoint(ctx, nilProbe, args)
		}
	})
}

// BenchmarkOtherBaggagePoint: the cost of a point armed for someone else's
// request — a breakpoint on this very point (kind and name match) scoped to
// baggage debug-session=ana — in requests that carry another session's
// baggage or none, inside two scopes; then the same while the probe steps
// ana's request (NEXT from her hold). Beside BenchmarkUnarmedPoint.
func BenchmarkOtherBaggagePoint(b *testing.B) {
	d := startDaemon(b, "")
	c := d.client(b)
	p := connect(b, d.addr, probe.Options{Name: "bench-baggage"})
	if _, err := c.AddBreakpoint(testContext(b), stepd.ProbeBreakpoint("tool_call", "Read", stepd.RequestBaggage("debug-session", "ana"))); err != nil {
		b.Fatal(err)
	}
	waitArmed(b, p, 1)
	ctx, end := p.Scope(context.Background(), "turn")
	defer end()
	ctx, end2 := p.Scope(ctx, "tool")
	defer end2()
	// What a propagator leaves for a request with a baggage header.
	bag, err := baggage.Parse("debug-session=bob,tenant=blue")
	if err != nil {
		b.Fatal(err)
	}
	other := baggage.ContextWithBaggage(ctx, bag)
	args := map[string]any{"cmd": "cat README.md"}

	b.Run("without", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			toolCall(other, args)
		}
	})
	b.Run("another-sessions-baggage", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			toolCallWithPoint(other, p, args)
		}
	})
	b.Run("no-baggage", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			toolCallWithPoint(ctx, p, args)
		}
	})
	b.Run("another-sessions-baggage-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				toolCallWithPoint(other, p, args)
			}
		})
	})

	// Stepping ana's request: her request holds at the breakpoint and is
	// answered NEXT, so the probe steps her request only; everyone else's
	// points are decided by the breakpoints alone.
	ev := subscribe(b, c)
	anaBag, err := baggage.Parse("debug-session=ana")
	if err != nil {
		b.Fatal(err)
	}
	held := make(chan error, 1)
	go func() {
		_, err := p.Hold(baggage.ContextWithBaggage(ctx, anaBag), "tool_call", "Read", args)
		held <- err
	}()
	answer(b, c, ev.pause(p.SessionID()).GetKey(), stepd.CmdNext())
	if err := <-held; err != nil {
		b.Fatal(err)
	}
	if a := p.Armed(); len(a.GetRequestScope()) == 0 {
		b.Fatalf("not stepping ana's request: %v", a)
	}
	b.Run("step-for-another-session-baggage", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			toolCallWithPoint(other, p, args)
		}
	})
	b.Run("step-for-another-request-no-baggage", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			toolCallWithPoint(ctx, p, args)
		}
	})
}

// BenchmarkHoldRoundTrip: a point holds, a subscriber (another connection of
// this process, as a separate client would be) sees the pause on Subscribe
// and answers CONTINUE on the same stream, and the point returns. One
// operation is one whole round trip; go test reports the mean, and the
// benchmark reports the median as p50-ns/op.
func BenchmarkHoldRoundTrip(b *testing.B) {
	d := startDaemon(b, "")
	c := d.client(b)
	p := connect(b, d.addr, probe.Options{Name: "bench-holds", Labels: map[string]string{"run": "holds"}})
	if _, err := c.AddBreakpoint(testContext(b), stepd.ProbeBreakpoint("tool_call", "Read", stepd.LabelSelector("run=holds"))); err != nil {
		b.Fatal(err)
	}
	waitArmed(b, p, 1)
	sub, err := d.client(b).Subscribe(testContext(b), stepd.WatchOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	go func() {
		for ev := range sub.Events() {
			if pause := ev.GetStopped().GetPause(); pause != nil && pause.GetRevision() == 0 {
				if err := sub.SendDebugInput(pause.GetKey(), stepd.CmdContinue()); err != nil {
					return
				}
			}
		}
	}()
	ctx := context.Background()
	args := map[string]any{"cmd": "cat README.md"}
	var samples []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := p.Hold(ctx, "tool_call", "Read", args, probe.Editable()); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds()), "p50-ns/op")
	b.ReportMetric(float64(samples[len(samples)*99/100].Nanoseconds()), "p99-ns/op")
}
