package probe_test

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"

	"github.com/stepd-dev/stepd/clients/go/probe"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

// requestContext is ctx as an OpenTelemetry baggage propagator leaves it for
// a request with this baggage header.
func requestContext(header string) context.Context {
	return propagation.Baggage{}.Extract(context.Background(), propagation.MapCarrier{"baggage": header})
}

// A breakpoint scoped to a session's baggage (minted by the client) holds
// only the request whose context carries that entry; others pass at once.
func TestBaggageScopedBreakpoint(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	p := connect(t, d.addr, probe.Options{})
	mine, other := stepd.MintBaggage(""), stepd.MintBaggage("")
	bp, err := c.AddBreakpoint(testContext(t), stepd.ProbeBreakpoint("tool_call", "transfer", mine.Spec()))
	if err != nil {
		t.Fatal(err)
	}
	waitArmed(t, p, 1)

	for _, ctx := range []context.Context{context.Background(), requestContext(other.String()), requestContext("tenant=" + mine.Value)} {
		if v, err := p.Hold(ctx, "tool_call", "transfer", 1); v != 1 || err != nil {
			t.Fatal(v, err)
		}
	}
	done := make(chan any, 1)
	go func() {
		v, err := p.Hold(requestContext("a=1, "+mine.String()+";prop=x"), "tool_call", "transfer", 2)
		if err != nil {
			t.Error(err)
		}
		done <- v
	}()
	pause := ev.pause(p.SessionID())
	if ids := pause.GetBreakpointIds(); len(ids) != 1 || ids[0] != bp.GetId() {
		t.Fatalf("breakpoint ids %v, want [%s]", ids, bp.GetId())
	}
	answer(t, c, pause.GetKey(), stepd.CmdContinue())
	if v := <-done; v != 2 {
		t.Fatal(v)
	}
}

func TestMintBaggage(t *testing.T) {
	a, b := stepd.MintBaggage(""), stepd.MintBaggage("tenant-debug")
	if a.Key != stepd.DefaultBaggageKey || len(a.Value) != 16 || strings.Trim(a.Value, "0123456789abcdef") != "" {
		t.Fatalf("minted %+v", a)
	}
	if a.Header() != "baggage: debug-session="+a.Value || b.Key != "tenant-debug" || a.Value == b.Value {
		t.Fatalf("minted %+v %+v", a, b)
	}
	// What a propagator makes of the header is the entry itself.
	if m := baggage.FromContext(requestContext(a.String())).Member(a.Key); m.Value() != a.Value {
		t.Fatalf("propagated %q", m.Value())
	}
}
