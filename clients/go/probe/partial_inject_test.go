package probe_test

import (
	"context"
	"testing"

	"github.com/stepd-dev/stepd/clients/go/probe"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

type bashArgs struct {
	Cmd     string            `json:"cmd"`
	Timeout int               `json:"timeout"`
	Env     map[string]string `json:"env"`
}

type tool struct{ p *probe.Probe }

// call holds from a pointer-receiver method, whose location reads as
// "probe_test.tool.call", not the runtime's "(*tool).call".
func (t *tool) call(args bashArgs) (bashArgs, error) {
	return probe.HoldAs(context.Background(), t.p, "tool_call", "Bash", args, probe.Editable())
}

// A partial INJECT changes only the fields it names (a JSON merge patch);
// null resets a field; the pause shows readable function names.
func TestHoldAsMergesAPartialInject(t *testing.T) {
	d := startDaemon(t, "")
	c := d.client(t)
	ev := subscribe(t, c)
	p := connect(t, d.addr, probe.Options{})
	if _, err := c.AddBreakpoint(testContext(t), stepd.ProbeBreakpoint("tool_call", "Bash")); err != nil {
		t.Fatal(err)
	}
	waitArmed(t, p, 1)
	tl := &tool{p}
	original := bashArgs{Cmd: "ls", Timeout: 30, Env: map[string]string{"A": "1", "B": "2"}}
	for _, step := range []struct {
		inject string
		want   bashArgs
	}{
		{`{"cmd": "pwd"}`, bashArgs{Cmd: "pwd", Timeout: 30, Env: map[string]string{"A": "1", "B": "2"}}},
		{`{"timeout": null, "env": {"A": null, "C": "3"}}`, bashArgs{Cmd: "ls", Env: map[string]string{"B": "2", "C": "3"}}},
	} {
		done := make(chan bashArgs, 1)
		go func() {
			got, err := tl.call(original)
			if err != nil {
				t.Error(err)
			}
			done <- got
		}()
		pause := ev.pause(p.SessionID())
		at := pause.GetLocation()
		if at.GetFunction() != "probe_test.tool.call" || at.GetModule() != "github.com/stepd-dev/stepd/clients/go/probe_test" {
			t.Errorf("location %v", at)
		}
		answer(t, c, pause.GetKey(), stepd.CmdInjectCode(step.inject))
		got := <-done
		if got.Cmd != step.want.Cmd || got.Timeout != step.want.Timeout || len(got.Env) != len(step.want.Env) {
			t.Errorf("after %s: %+v, want %+v", step.inject, got, step.want)
		}
		for k, v := range step.want.Env {
			if got.Env[k] != v {
				t.Errorf("after %s: env %v, want %v", step.inject, got.Env, step.want.Env)
			}
		}
	}
}
