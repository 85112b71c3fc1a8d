package probe_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

const deadline = 30 * time.Second

var (
	stepdBin string
	agentBin string
)

func TestMain(m *testing.M) {
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe tests:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	bin, err := findStepd()
	if err != nil {
		return 0, err
	}
	stepdBin = bin
	dir, err := os.MkdirTemp("", "stepd-probe-test")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	agentBin = filepath.Join(dir, "testagent")
	build := exec.Command("go", "build", "-o", agentBin, "./internal/testagent")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return 0, fmt.Errorf("building the test agent: %w", err)
	}
	return m.Run(), nil
}

func findStepd() (string, error) {
	if bin := os.Getenv("STEPD_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("STEPD_BIN: %w", err)
		}
		return bin, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "Cargo.toml"))
		if err == nil && bytes.Contains(data, []byte("[workspace]")) {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no Cargo workspace above the test directory; set STEPD_BIN")
		}
		dir = parent
	}
	bin := filepath.Join(dir, "target", "debug", "stepd")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	cmd := exec.Command("cargo", "build", "-p", "stepd", "--bin", "stepd")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building stepd: %w", err)
	}
	return bin, nil
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// daemon is one stepd process.
type daemon struct {
	addr string
	// stopOptions dial the Shutdown call (TLS options for a TLS daemon).
	stopOptions []stepd.Option
	cmd         *exec.Cmd
	exited      chan struct{}
	stderr      *lockedBuffer
}

// startDaemon starts stepd on a free loopback port (or listen) with a fresh
// data directory and stops it when the test ends.
func startDaemon(t testing.TB, listen string, extra ...string) *daemon {
	t.Helper()
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	args := append([]string{"--listen", listen, "--data-dir", t.TempDir(), "--no-unix-socket"}, extra...)
	cmd := exec.Command(stepdBin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STEPD_") && !strings.HasPrefix(kv, "RUST_LOG=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "RUST_LOG=info")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, exited: make(chan struct{}), stderr: &lockedBuffer{}}
	cmd.Stderr = d.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start stepd: %v", err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "stepd ready ") {
				ready <- line
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(d.exited)
	}()
	select {
	case line := <-ready:
		for _, field := range strings.Fields(line)[2:] {
			if k, v, _ := strings.Cut(field, "="); k == "tcp" {
				d.addr = v
			}
		}
	case <-d.exited:
		t.Fatalf("stepd exited before it was ready\n%s", d.stderr)
	case <-time.After(deadline):
		_ = cmd.Process.Kill()
		t.Fatalf("stepd was not ready in time\n%s", d.stderr)
	}
	t.Cleanup(func() {
		d.stop(t)
		if t.Failed() {
			t.Logf("stepd stderr:\n%s", d.stderr)
		}
	})
	return d
}

func (d *daemon) stop(t testing.TB) {
	select {
	case <-d.exited:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := stepd.Dial(ctx, d.addr, d.stopOptions...); err == nil {
		_ = c.Shutdown(ctx)
		c.Close()
	}
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
}

func (d *daemon) client(t testing.TB) *stepd.Client {
	t.Helper()
	c, err := stepd.Dial(context.Background(), d.addr, stepd.WithClientName("probe-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*deadline)
	t.Cleanup(cancel)
	return ctx
}

// events is a subscription with helpers to wait for events.
type events struct {
	t   testing.TB
	sub *stepd.Subscription
}

func subscribe(t testing.TB, c *stepd.Client) *events {
	t.Helper()
	sub, err := c.Subscribe(testContext(t), stepd.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	return &events{t: t, sub: sub}
}

// waitFor returns the first event that satisfies pred.
func (e *events) waitFor(what string, pred func(*stepdv1.Event) bool) *stepdv1.Event {
	e.t.Helper()
	timeout := time.After(deadline)
	for {
		select {
		case ev, ok := <-e.sub.Events():
			if !ok {
				e.t.Fatalf("waiting for %s: the subscription ended: %v", what, e.sub.Err())
			}
			if pred(ev) {
				return ev
			}
		case <-timeout:
			e.t.Fatalf("no %s in time", what)
		}
	}
}

// pause waits for the next pause of session.
func (e *events) pause(session string) *stepdv1.Pause {
	e.t.Helper()
	ev := e.waitFor("a pause", func(ev *stepdv1.Event) bool {
		return ev.GetSessionId() == session && ev.GetStopped().GetPause() != nil
	})
	return ev.GetStopped().GetPause()
}

// agent is the instrumented test program, in its own process.
type agent struct {
	t       testing.TB
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan string
	mu      sync.Mutex
	seen    []string
	session string
	exited  chan struct{}
}

func startAgent(t testing.TB, d *daemon, args ...string) *agent {
	t.Helper()
	cmd := exec.Command(agentBin, append([]string{"-addr", d.addr}, args...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &agent{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 1024), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			a.lines <- sc.Text()
		}
		close(a.lines)
	}()
	go func() {
		_ = cmd.Wait()
		close(a.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-a.exited
		if t.Failed() {
			a.mu.Lock()
			t.Logf("agent output:\n%s\nagent stderr:\n%s", strings.Join(a.seen, "\n"), stderr)
			a.mu.Unlock()
		}
	})
	a.session = strings.TrimPrefix(a.expect("session "), "session ")
	return a
}

func (a *agent) send(line string) {
	a.t.Helper()
	if _, err := io.WriteString(a.stdin, line+"\n"); err != nil {
		a.t.Fatalf("agent stdin: %v", err)
	}
}

// expect waits for the agent's next line starting with prefix; the lines
// before it are kept in seen.
func (a *agent) expect(prefix string) string {
	a.t.Helper()
	timeout := time.After(deadline)
	for {
		select {
		case line, ok := <-a.lines:
			if !ok {
				a.t.Fatalf("the agent exited before printing %q", prefix)
			}
			a.mu.Lock()
			a.seen = append(a.seen, line)
			a.mu.Unlock()
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timeout:
			a.t.Fatalf("the agent did not print %q in time", prefix)
		}
	}
}

// printed reports whether the agent printed a line starting with prefix so far.
func (a *agent) printed(prefix string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, l := range a.seen {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

// arm adds the breakpoints and waits until the agent has them all armed.
func arm(t testing.TB, c *stepd.Client, a *agent, specs ...*stepdv1.BreakpointSpec) []string {
	t.Helper()
	return armN(t, c, a, len(specs), specs...)
}

// armN adds the breakpoints and waits until the agent has n matchers armed
// (fewer than the breakpoints when a label selector leaves some out).
func armN(t testing.TB, c *stepd.Client, a *agent, n int, specs ...*stepdv1.BreakpointSpec) []string {
	t.Helper()
	var ids []string
	for _, s := range specs {
		bp, err := c.AddBreakpoint(testContext(t), s)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, bp.GetId())
	}
	a.send(fmt.Sprintf("armed %d", n))
	if got := a.expect("armed "); got != fmt.Sprintf("armed %d", n) {
		t.Fatalf("agent: %s", got)
	}
	return ids
}

func answer(t testing.TB, c *stepd.Client, key string, cmd *stepdv1.DebugCommand) *stepdv1.SendDebugInputResponse {
	t.Helper()
	r, err := c.SendDebugInput(testContext(t), key, cmd)
	if err != nil {
		t.Fatalf("answer %v: %v", cmd, err)
	}
	return r
}
