package probe

import (
	"context"
	"testing"

	oteltrace "go.opentelemetry.io/otel/trace"
)

func TestTraceContextOfASpan(t *testing.T) {
	if tp, ts := traceContext(context.Background()); tp != "" || ts != "" {
		t.Fatalf("no span: %q %q", tp, ts)
	}
	if tp, _ := traceContext(nil); tp != "" { //nolint:staticcheck // a nil ctx is accepted by Hold
		t.Fatalf("nil ctx: %q", tp)
	}
	state, err := oteltrace.ParseTraceState("vendor=x,other=y")
	if err != nil {
		t.Fatal(err)
	}
	sc := oteltrace.NewSpanContext(oteltrace.SpanContextConfig{
		TraceID:    oteltrace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
		SpanID:     oteltrace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31},
		TraceFlags: oteltrace.FlagsSampled,
		TraceState: state,
		Remote:     true,
	})
	tp, ts := traceContext(oteltrace.ContextWithSpanContext(context.Background(), sc))
	if tp != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" || ts != "vendor=x,other=y" {
		t.Fatalf("got %q %q", tp, ts)
	}
	// Explicit wins, then the context, then the environment.
	t.Setenv("TRACEPARENT", "00-11111111111111111111111111111111-2222222222222222-01")
	t.Setenv("TRACESTATE", "env=1")
	if tp, _ := helloTrace(oteltrace.ContextWithSpanContext(context.Background(), sc), "explicit"); tp != "explicit" {
		t.Fatalf("explicit: %q", tp)
	}
	if tp, _ := helloTrace(oteltrace.ContextWithSpanContext(context.Background(), sc), ""); tp[3:7] != "0af7" {
		t.Fatalf("ctx: %q", tp)
	}
	if tp, ts := helloTrace(context.Background(), ""); tp[3:7] != "1111" || ts != "env=1" {
		t.Fatalf("env: %q %q", tp, ts)
	}
}
