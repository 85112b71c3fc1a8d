package probe_test

import (
	"context"
	"strings"
	"testing"

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
