package probe_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/stepd-dev/stepd/clients/go/probe"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

// A breakpoint selecting pod=web-1 and one user holds that user's request in
// that pod only; the pod label comes from the environment (POD_NAME).
func TestOneRequestOfOneUserInOnePod(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	run := fmt.Sprint(time.Now().UnixNano())
	if _, err := c.AddBreakpoint(testContext(t), stepd.ProbeBreakpoint("request", "GET /orders",
		stepd.LabelSelector("pod=web-1,namespace=shop,run="+run), stepd.Condition(`value.user == "alice"`))); err != nil {
		t.Fatal(err)
	}
	t.Setenv("POD_NAMESPACE", "shop")
	t.Setenv("POD_NAME", "web-2")
	web2 := connect(t, d.addr, probe.Options{Name: "web", Labels: map[string]string{"run": run}})
	t.Setenv("POD_NAME", "web-1")
	web1 := connect(t, d.addr, probe.Options{Name: "web", Labels: map[string]string{"run": run}})
	plain := connect(t, d.addr, probe.Options{Name: "web", Labels: map[string]string{"run": run}, NoEnvironmentLabels: true})
	waitArmed(t, web1, 1)

	order := func(p *probe.Probe, user string) any {
		// A hold that should not happen fails the test instead of hanging it.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		v, err := p.Hold(ctx, "request", "GET /orders", map[string]any{"user": user, "total": 10.0}, probe.Editable())
		if err != nil {
			t.Error(err)
		}
		return v
	}
	// Connected after the breakpoint, so their arming already left it out.
	for _, p := range []*probe.Probe{web2, plain} {
		if got := order(p, "alice"); got.(map[string]any)["total"] != 10.0 {
			t.Errorf("not held, yet changed: %v", got)
		}
	}
	if got := order(web1, "bob"); got.(map[string]any)["total"] != 10.0 {
		t.Errorf("bob's request: %v", got)
	}
	held := make(chan any, 1)
	go func() { held <- order(web1, "alice") }()
	pause := ev.pause(web1.SessionID())
	want := map[string]string{"pod": "web-1", "namespace": "shop", "run": run}
	if got := pause.GetPoint().GetLabels(); !maps.Equal(got, want) {
		t.Errorf("labels %v, want %v", got, want)
	}
	answer(t, c, pause.GetKey(), stepd.CmdInjectValue(mustValue(t, map[string]any{"user": "alice", "total": 0})))
	if got := <-held; got.(map[string]any)["total"] != 0.0 {
		t.Errorf("alice's request after INJECT: %v", got)
	}
}
