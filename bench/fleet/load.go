package main

// The observing probes run in a process of their own, as the other programs
// of a fleet do: the holder's round trip then waits on the daemon, not behind
// a thousand goroutines of its own process's scheduler.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stepd-dev/stepd/clients/go/probe"
)

// loadMain is the child's side with library probes: it connects n probes
// to addr, reports "c CONNECTED OBSERVED DROPPED" on stdout every 20 ms,
// observes at rate between "load" and "idle" lines on stdin, and exits
// when stdin closes.
func loadMain(addr string, n, rate int, flush time.Duration) error {
	ctx := context.Background()
	probes := make([]*probe.Probe, n)
	for i := range probes {
		p, err := probe.Connect(ctx, probe.Options{Addr: addr, Name: fmt.Sprintf("p%d", i+1),
			Labels: map[string]string{"fleet": "idle"}, NoEnvironmentLabels: true, FlushInterval: flush})
		if err != nil {
			return fmt.Errorf("probe %d: %w", i+1, err)
		}
		defer p.Close()
		probes[i] = p
	}
	var observed atomic.Int64
	go func() {
		for {
			var dropped uint64
			for _, p := range probes {
				dropped += p.Stats().ReportsDropped
			}
			fmt.Printf("c %d %d %d\n", connected(probes), observed.Load(), dropped)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	if rate <= 0 {
		return conversation(func(chan struct{}) {})
	}
	interval := time.Duration(float64(time.Second) * float64(n) / float64(rate))
	return conversation(func(stop chan struct{}) {
		var wg sync.WaitGroup
		for _, p := range probes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t := time.NewTicker(interval)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
						p.Observe(ctx, "tool_result", "Read", "ok")
						observed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
	})
}

// conversation observes with observe between "load" and "idle" lines on
// stdin (observe returns once stop is closed), and returns when stdin
// closes.
func conversation(observe func(stop chan struct{})) error {
	var stop chan struct{}
	var running sync.WaitGroup
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "load":
			if stop != nil {
				continue
			}
			stop = make(chan struct{})
			running.Add(1)
			go func(stop chan struct{}) {
				defer running.Done()
				observe(stop)
			}(stop)
		case "idle":
			if stop != nil {
				close(stop)
				running.Wait()
				stop = nil
			}
		}
	}
	return nil
}

// load is the parent's handle on the child.
type load struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	state atomic.Pointer[[3]int64]
}

func startLoad(addr string, n, rate, procs int, flush time.Duration, lean bool) (*load, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-load", addr, "-probes", strconv.Itoa(n), "-rate", strconv.Itoa(rate), "-flush", flush.String(), "-lean="+strconv.FormatBool(lean), "-procs", strconv.Itoa(procs))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	l := &load{cmd: cmd, in: in}
	l.state.Store(&[3]int64{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 4 || f[0] != "c" {
				continue
			}
			var s [3]int64
			for i := range s {
				s[i], _ = strconv.ParseInt(f[i+1], 10, 64)
			}
			l.state.Store(&s)
		}
	}()
	return l, nil
}

func (l *load) connected() int        { return int(l.state.Load()[0]) }
func (l *load) observed() int64       { return l.state.Load()[1] }
func (l *load) dropped() uint64       { return uint64(l.state.Load()[2]) }
func (l *load) send(cmd string) error { _, err := fmt.Fprintln(l.in, cmd); return err }

func (l *load) close() {
	_ = l.in.Close()
	_ = l.cmd.Wait()
}
