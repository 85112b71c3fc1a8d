// Command testagent is a small instrumented program the probe tests run in
// a separate process. It connects, prints "session <id>", then obeys lines
// on stdin:
//
//	armed N   wait until at least N breakpoint matchers are armed, print "armed"
//	run       run the turns, printing one line per point, then "done"
//	quit      close the probe and exit
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/stepd-dev/stepd/clients/go/probe"
)

// BashArgs are a tool call's arguments.
type BashArgs struct {
	Cmd  string `json:"cmd"`
	Turn int    `json:"turn"`
}

var turn atomic.Int64

func main() {
	addr := flag.String("addr", "", "daemon address")
	turns := flag.Int("turns", 1, "turns to run")
	labels := flag.String("labels", "", "k=v,k=v")
	flag.Parse()
	lbl := map[string]string{}
	for _, kv := range strings.Split(*labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			lbl[k] = v
		}
	}
	ctx := context.Background()
	p, err := probe.Connect(ctx, probe.Options{
		Name:   "testagent",
		Labels: lbl,
		Addr:   *addr,
		Eval: func(code string) (string, error) {
			switch code {
			case "turn":
				return strconv.FormatInt(turn.Load(), 10), nil
			case "pid":
				return strconv.Itoa(os.Getpid()), nil
			}
			return "", fmt.Errorf("cannot evaluate %q", code)
		},
	})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	if err := p.WaitConnected(wctx); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	cancel()
	fmt.Println("session", p.SessionID())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(strings.TrimSpace(in.Text()), " ")
		switch cmd {
		case "armed":
			n, _ := strconv.Atoi(arg)
			deadline := time.Now().Add(20 * time.Second)
			for len(p.Armed().GetMatchers()) < n && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			fmt.Println("armed", len(p.Armed().GetMatchers()))
		case "run":
			run(ctx, p, *turns)
			fmt.Println("done")
		case "quit":
			p.Close()
			return
		}
	}
	p.Close()
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func report(kind, name string, v any, err error) {
	e := "nil"
	switch {
	case errors.Is(err, probe.ErrSkipped):
		e = "skipped"
	case errors.Is(err, probe.ErrStopped):
		e = "stopped"
	case err != nil:
		e = strconv.Quote(err.Error())
	}
	fmt.Printf("point %s %s value=%s err=%s\n", kind, name, show(v), e)
}

func run(ctx context.Context, p *probe.Probe, turns int) {
	for t := range turns {
		turn.Store(int64(t))
		if stop := runTurn(ctx, p, t); stop {
			return
		}
	}
	v, err := p.Hold(ctx, "exit", "main", turns)
	report("exit", "main", v, err)
	err = p.OnError(ctx, "error", "final", errors.New("boom"))
	report("error", "final", nil, err)
}

func runTurn(ctx context.Context, p *probe.Probe, t int) (stop bool) {
	ctx, end := p.Scope(ctx, "turn")
	defer end()
	v, err := p.Hold(ctx, "prompt", "user", fmt.Sprintf("hello %d", t), probe.Editable())
	report("prompt", "user", v, err)
	if errors.Is(err, probe.ErrStopped) {
		return true
	}
	p.Observe(ctx, "skill_loaded", "pdf", map[string]any{"turn": t})
	{
		ctx, end := p.Scope(ctx, "tool")
		v, err := p.Hold(ctx, "tool_call", "Read", map[string]any{"path": "a", "turn": t}, probe.Editable())
		report("tool_call", "Read", v, err)
		args, err := probe.HoldAs(ctx, p, "tool_call", "Bash", BashArgs{Cmd: "ls", Turn: t}, probe.TypeHint("dict"))
		report("tool_call", "Bash", args, err)
		if errors.Is(err, probe.ErrStopped) {
			end()
			return true
		}
		if err == nil {
			out, err := p.Hold(ctx, "tool_result", "Bash", "ran "+args.Cmd, probe.TypeHint("str"))
			report("tool_result", "Bash", out, err)
		}
		end()
	}
	v, err = p.Hold(ctx, "turn_end", "done", t)
	report("turn_end", "done", v, err)
	return false
}
