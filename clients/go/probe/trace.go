package probe

import (
	"context"
	"os"

	oteltrace "go.opentelemetry.io/otel/trace"
)

// traceContext is the W3C traceparent and tracestate of the span ctx
// carries (through the OpenTelemetry API), or empty when it carries none:
// a hold then sends it, so its pause is a span in the program's trace.
func traceContext(ctx context.Context) (traceparent, tracestate string) {
	if ctx == nil {
		return "", ""
	}
	sc := oteltrace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return "", ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String(),
		sc.TraceState().String()
}

// helloTrace is what Hello carries: Options.Traceparent, else the span of
// Connect's ctx, else $TRACEPARENT (a parent that started the process).
func helloTrace(ctx context.Context, explicit string) (traceparent, tracestate string) {
	if explicit != "" {
		return explicit, ""
	}
	if tp, ts := traceContext(ctx); tp != "" {
		return tp, ts
	}
	return os.Getenv("TRACEPARENT"), os.Getenv("TRACESTATE")
}
