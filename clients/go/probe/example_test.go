package probe_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/stepd-dev/stepd/clients/go/probe"
)

type call struct {
	Tool string
	Args map[string]any
}

func lookup(code string) (string, error) { return "", fmt.Errorf("cannot evaluate %q", code) }

func run(tool string, args map[string]any) (string, error) { return tool + " ran", nil }

// The example of clients/go/README.md, compiled (not run: it needs a daemon).
func Example() {
	ctx := context.Background()
	calls := []call{{"Bash", map[string]any{"cmd": "ls"}}}
	err := func() error {
		p, err := probe.Connect(ctx, probe.Options{Name: "agent", Labels: map[string]string{"agent": "main"},
			Eval: func(code string) (string, error) { return lookup(code) }}) // Addr: "" = $STEPD_ADDR
		if err != nil {
			return err
		}
		defer p.Close()
		for _, call := range calls {
			ctx, end := p.Scope(ctx, "turn") // scopes travel in the context
			args, err := probe.HoldAs(ctx, p, "tool_call", call.Tool, call.Args, probe.TypeHint("dict"))
			switch {
			case errors.Is(err, probe.ErrSkipped):
				end()
				continue // SKIP: do not run the tool
			case errors.Is(err, probe.ErrStopped):
				end()
				return err // QUIT
			}
			out, runErr := run(call.Tool, args)
			runErr = p.OnError(ctx, "tool_error", call.Tool, runErr) // holds only when runErr != nil
			p.Observe(ctx, "tool_result", call.Tool, out)            // reported, never holds
			end()
			_ = runErr
		}
		return nil
	}()
	_ = err
}
