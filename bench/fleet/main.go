// Command fleet is the many-probes benchmark: N probe connections (one
// gRPC connection each, as N programs would have) to one stepd, and
//
//   - the daemon's memory per connected, idle probe;
//
//   - the hold round trip of one probe while the others, from a process of
//     their own as other programs would be, send observed points at a
//     combined rate;
//
//   - the time for every probe to reconnect after the daemon restarts on
//     the same address and data directory.
//
//     go run . -stepd target/release/stepd [-probes 1000] [-rate 50000] [-holds 2000] [-lean] [-procs 1]
//
// With -lean the observing probes are spoken at the protocol level
// (lean.go): the daemon reads the same messages, and the load generator
// takes a fraction of the CPU it otherwise would. Lean probes do not
// reconnect, so that run does not restart the daemon.
//
// Both of its processes run Go with one P (-procs): on a machine of two
// CPUs, two Go processes of two Ps each left the daemon's workers waiting
// for a CPU behind the load's and the measurement's own threads.
package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
	"github.com/stepd-dev/stepd/clients/go/probe"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

func main() {
	bin := flag.String("stepd", os.Getenv("STEPD_BIN"), "the stepd binary")
	n := flag.Int("probes", 1000, "probe connections")
	rate := flag.Int("rate", 50000, "observed points per second, all probes together")
	holds := flag.Int("holds", 2000, "holds measured")
	flush := flag.Duration("flush", 0, "the observing probes' FlushInterval (0: the library's default)")
	loadAddr := flag.String("load", "", "run as the observing probes' process, connected to this address")
	lean := flag.Bool("lean", false, "the observing probes speak the protocol themselves instead of running the probe library")
	procs := flag.Int("procs", 1, "GOMAXPROCS of this program and of the observing probes' process (0: Go's default, one per CPU)")
	flag.Parse()
	// The programs of a fleet run on machines of their own. Here they share
	// the daemon's CPUs, and each Go process's spare threads would take
	// turns with the daemon's workers on them.
	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	}
	if *loadAddr != "" {
		run := func() error { return loadMain(*loadAddr, *n, *rate, *flush) }
		if *lean {
			run = func() error { return leanMain(*loadAddr, *n, *rate, cmp.Or(*flush, probe.DefaultFlushInterval)) }
		}
		if err := run(); err != nil {
			fmt.Fprintln(os.Stderr, "fleet load:", err)
			os.Exit(1)
		}
		return
	}
	maxConnections = max(maxConnections, *n+64)
	if err := run(*bin, *n, *rate, *holds, *procs, *flush, *lean); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// maxConnections is the daemon's connection cap for the run, set from -probes.
var maxConnections = 512

type daemon struct {
	cmd  *exec.Cmd
	addr string
}

// start runs stepd on listen (127.0.0.1:0 for any port) and waits for its
// ready line.
func start(bin, listen, dataDir string) (*daemon, error) {
	// One connection per probe, and a few for the clients: over the default cap.
	cmd := exec.Command(bin, "--listen", listen, "--data-dir", dataDir, "--no-unix-socket", "--max-connections", strconv.Itoa(maxConnections))
	cmd.Env = append(os.Environ(), "RUST_LOG=warn")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "stepd ready ") {
				ready <- line
			}
		}
	}()
	select {
	case line := <-ready:
		for _, field := range strings.Fields(line)[2:] {
			if k, v, _ := strings.Cut(field, "="); k == "tcp" {
				return &daemon{cmd: cmd, addr: v}, nil
			}
		}
		return nil, fmt.Errorf("no tcp address in %q", line)
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("stepd did not get ready")
	}
}

func (d *daemon) stop() error {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	return d.cmd.Wait()
}

// rssKiB reads the daemon's resident set from /proc.
func (d *daemon) rssKiB() int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return kib
		}
	}
	return 0
}

// stage tells the operator where a long run is.
func stage(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fleet: "+format+"\n", args...)
}

func waitFor(what string, limit time.Duration, done func() bool) error {
	deadline := time.Now().Add(limit)
	for !done() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

func connected(probes []*probe.Probe) int {
	n := 0
	for _, p := range probes {
		if p.Connected() {
			n++
		}
	}
	return n
}

func run(bin string, n, rate, holds, procs int, flush time.Duration, lean bool) error {
	if bin == "" {
		return fmt.Errorf("-stepd (or STEPD_BIN) names the binary")
	}
	dir, err := os.MkdirTemp("", "stepd-fleet-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	dataDir := filepath.Join(dir, "data")
	d, err := start(bin, "127.0.0.1:0", dataDir)
	if err != nil {
		return err
	}
	defer func() { _ = d.stop() }()
	ctx := context.Background()
	client, err := stepd.Dial(ctx, d.addr)
	if err != nil {
		return err
	}
	defer client.Close()
	if _, err := client.Ping(ctx); err != nil {
		return err
	}
	base := d.rssKiB()

	// N probes, each its own connection: the first, which holds, in this
	// process; the others, which observe, in a process of their own.
	began := time.Now()
	holder, err := probe.Connect(ctx, probe.Options{Addr: d.addr, Name: "p0", Labels: map[string]string{"fleet": "holder"}, NoEnvironmentLabels: true})
	if err != nil {
		return fmt.Errorf("the holding probe: %w", err)
	}
	defer holder.Close()
	others, err := startLoad(d.addr, n-1, rate, procs, flush, lean)
	if err != nil {
		return err
	}
	defer others.close()
	all := func() int {
		c := others.connected()
		if holder.Connected() {
			c++
		}
		return c
	}
	if err := waitFor("all probes connected", time.Minute, func() bool { return all() == n }); err != nil {
		return err
	}
	connectTime := time.Since(began)
	stage("%d probes connected in %v", n, connectTime)
	// Let the connections settle (HTTP/2 windows, first heartbeats) before reading memory.
	time.Sleep(2 * time.Second)
	idle := d.rssKiB()
	perProbe := float64(idle-base) / float64(n)

	// The holder's breakpoint, and a subscriber on its session only that answers.
	if _, err := client.AddBreakpoint(ctx, stepd.ProbeBreakpoint("tool_call", "Read", stepd.LabelSelector("fleet=holder"))); err != nil {
		return err
	}
	if err := waitFor("holder armed", 30*time.Second, func() bool { return len(holder.Armed().GetMatchers()) == 1 }); err != nil {
		return err
	}
	sub, err := client.Subscribe(ctx, stepd.WatchOptions{SessionIDs: []string{holder.SessionID()}, Channels: []stepdv1.EventChannel{stepdv1.EventChannel_EVENT_CHANNEL_EXECUTION}})
	if err != nil {
		return err
	}
	defer sub.Close()
	var resyncs atomic.Int64
	var lastSeq atomic.Uint64
	go func() {
		defer func() {
			if err := sub.Err(); err != nil {
				stage("the answering subscription ended: %v", err)
			}
		}()
		for ev := range sub.Events() {
			if ev.GetSeq() > lastSeq.Load() {
				lastSeq.Store(ev.GetSeq())
			}
			if pause := ev.GetStopped().GetPause(); pause != nil && pause.GetRevision() == 0 {
				_ = sub.SendDebugInput(pause.GetKey(), stepd.CmdContinue())
			}
			// After a gap the pending pause is in the snapshot, not in an event.
			if gap := ev.GetGap(); gap != nil && gap.GetToSeq() > 0 {
				resyncs.Add(1)
			}
			for _, pause := range ev.GetSnapshot().GetPauses() {
				_ = sub.SendDebugInput(pause.GetKey(), stepd.CmdContinue())
			}
		}
	}()

	// The others observe points at `rate` per second together.
	if err := others.send("load"); err != nil {
		return err
	}
	stage("holding while %d probes observe", n-1)
	args := map[string]any{"cmd": "cat README.md"}
	for range 100 { // warm-up
		if _, err := holder.Hold(ctx, "tool_call", "Read", args); err != nil {
			return err
		}
	}
	loadFrom, loadStart := others.observed(), time.Now()
	samples := make([]time.Duration, 0, holds)
	for i := range holds {
		start := time.Now()
		// A hold nobody answers fails the run instead of hanging it.
		held, cancel := context.WithTimeout(ctx, time.Minute)
		_, err := holder.Hold(held, "tool_call", "Read", args)
		cancel()
		if err != nil {
			return fmt.Errorf("hold %d: %w (the subscriber resynchronised %d times)", i, err, resyncs.Load())
		}
		samples = append(samples, time.Since(start))
	}
	achieved := float64(others.observed()-loadFrom) / time.Since(loadStart).Seconds()
	if err := others.send("idle"); err != nil {
		return err
	}
	stage("the subscriber resynchronised %d times under load", resyncs.Load())
	slices.Sort(samples)
	p50, p99 := samples[len(samples)/2], samples[len(samples)*99/100]
	dropped := others.dropped()
	loaded := d.rssKiB()
	gaps := "—" // history recording off (STEPD_NO_HISTORY)
	// A history that has not caught up is what the column is for, so it
	// is shown, not taken for a failed run.
	if count, caughtUp, err := historyGaps(ctx, client, holder.SessionID(), lastSeq.Load()); err == nil {
		gaps = strconv.Itoa(count)
		if !caughtUp {
			gaps += ", still behind after a minute"
		}
	} else if !errors.Is(err, stepd.ErrSessionNotFound) {
		return err
	}

	reconnected := "—"
	if !lean {
		took, err := restart(d, bin, dataDir, all, n)
		if err != nil {
			return err
		}
		reconnected = fmt.Sprintf("%.2f s", took.Seconds())
	}
	fmt.Printf("| probes | connect all | RSS idle − before | per idle probe | hold p50 | hold p99 | observed/s achieved | reports dropped | RSS under load | reconnect all after restart | history gaps |\n")
	fmt.Printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	fmt.Printf("| %d | %.2f s | %.1f MiB | %.1f KiB | %.3f ms | %.3f ms | %.0f | %d | %.1f MiB | %s | %s |\n",
		n, connectTime.Seconds(), float64(idle-base)/1024, perProbe,
		float64(p50.Microseconds())/1000, float64(p99.Microseconds())/1000,
		achieved, dropped, float64(loaded)/1024, reconnected, gaps)
	return nil
}

// historyGaps counts the gaps in a session's recorded history once it holds
// the session's events through seq `through`, reading each page once: the
// last page's token is asked again until the history has caught up. The
// history's writer records a gap in every live session's history when it
// falls so far behind that the bus's rings no longer hold what it missed, so
// one session tells whether the history kept up with the load.
func historyGaps(ctx context.Context, client *stepd.Client, session string, through uint64) (gaps int, caughtUp bool, err error) {
	newest := uint64(0)
	req := &stepdv1.GetSessionHistoryRequest{SessionId: session, PageSize: 1000}
	var failed error
	err = waitFor("the history caught up", time.Minute, func() bool {
		for failed == nil {
			resp, err := client.HistoryService().GetSessionHistory(ctx, req)
			if err != nil {
				failed = stepd.FromError(err)
				break
			}
			for _, ev := range resp.GetEvents() {
				if ev.GetSeq() <= newest {
					continue // the last page again
				}
				newest = ev.GetSeq()
				if ev.GetGap() != nil {
					gaps++
				}
			}
			if resp.GetNextPageToken() == "" {
				break
			}
			req.PageToken = resp.GetNextPageToken()
		}
		return failed != nil || newest >= through
	})
	if failed != nil {
		return 0, false, failed
	}
	return gaps, err == nil, nil
}

// restart stops d and starts it again on the same address and data
// directory, and times until every probe is connected again.
func restart(d *daemon, bin, dataDir string, all func() int, n int) (time.Duration, error) {
	stage("restarting the daemon")
	// Restart on the same address and data directory; every probe reconnects.
	addr := d.addr
	if err := d.stop(); err != nil {
		return 0, fmt.Errorf("stopping stepd: %w", err)
	}
	if err := waitFor("probes see the daemon gone", 30*time.Second, func() bool { return all() == 0 }); err != nil {
		return 0, err
	}
	restarted := time.Now()
	again, err := start(bin, addr, dataDir)
	if err != nil {
		return 0, err
	}
	*d = *again
	if err := waitFor("all probes reconnected", 60*time.Second, func() bool { return all() == n }); err != nil {
		return 0, err
	}
	return time.Since(restarted), nil
}
