package probe_test

import (
	"context"
	"net"
	"strings"
	"testing"

	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/stepd-dev/stepd/clients/go/probe"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

// tracedDaemon traces and exports to a port nobody listens on: spans are
// made and their ids stamped, so the ids say which parent it read.
func tracedDaemon(t *testing.T) *daemon {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "200")
	return startDaemon(t, "")
}

func spanContext(trace, span byte) oteltrace.SpanContext {
	return oteltrace.NewSpanContext(oteltrace.SpanContextConfig{
		TraceID:    oteltrace.TraceID{trace, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
		SpanID:     oteltrace.SpanID{span, 1, 2, 3, 4, 5, 6, 7},
		TraceFlags: oteltrace.FlagsSampled,
	})
}

// A hold carries the span of its ctx, so its pause is in the program's
// trace; Connect's ctx parents the session; Traceparent overrides.
func TestHoldsCarryTheSpanOfTheirContext(t *testing.T) {
	d := tracedDaemon(t)
	c := d.client(t)
	ev := subscribe(t, c)
	startup := spanContext(0xaa, 0x01)
	ctx := oteltrace.ContextWithSpanContext(testContext(t), startup)
	p, err := probe.Connect(ctx, probe.Options{Addr: d.addr, Name: "traced"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.WaitConnected(testContext(t)); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetSession(testContext(t), p.SessionID())
	if err != nil {
		t.Fatal(err)
	}
	session := got.GetSession()
	if session.GetTraceId() != startup.TraceID().String() {
		t.Fatalf("session trace %q, want Connect's %s", session.GetTraceId(), startup.TraceID())
	}
	if _, err := c.AddBreakpoint(testContext(t), stepd.ProbeBreakpoint("tool_call", "*")); err != nil {
		t.Fatal(err)
	}
	waitArmed(t, p, 1)

	request := spanContext(0xbb, 0x02)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		opts []probe.HoldOption
		want string
	}{
		{"in-span", oteltrace.ContextWithSpanContext(context.Background(), request), nil, request.TraceID().String()},
		{"no-span", context.Background(), nil, session.GetTraceId()},
		{"explicit", oteltrace.ContextWithSpanContext(context.Background(), request),
			[]probe.HoldOption{probe.Traceparent("00-" + strings.Repeat("c", 32) + "-" + strings.Repeat("d", 16) + "-01")},
			strings.Repeat("c", 32)},
		{"malformed", context.Background(), []probe.HoldOption{probe.Traceparent("00-nope")}, session.GetTraceId()},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := p.Hold(tc.ctx, "tool_call", tc.name, nil, tc.opts...)
			done <- err
		}()
		pause := ev.pause(p.SessionID())
		if pause.GetTraceId() != tc.want {
			t.Errorf("%s: pause trace %q, want %q", tc.name, pause.GetTraceId(), tc.want)
		}
		answer(t, c, pause.GetKey(), stepd.CmdContinue())
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
}
