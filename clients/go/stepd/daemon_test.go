package stepd_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepd-dev/stepd/clients/go/stepd"
)

// stepdBin is the daemon binary the tests run: $STEPD_BIN, else
// <repo>/target/debug/stepd, built with cargo when it is missing.
var stepdBin string

func TestMain(m *testing.M) {
	bin, err := findStepd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "stepd tests:", err)
		os.Exit(1)
	}
	stepdBin = bin
	os.Exit(m.Run())
}

func findStepd() (string, error) {
	if bin := os.Getenv("STEPD_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("STEPD_BIN: %w", err)
		}
		return bin, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, "target", "debug", "stepd")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	cmd := exec.Command("cargo", "build", "-p", "stepd", "--bin", "stepd")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building stepd: %w", err)
	}
	return bin, nil
}

// repoRoot is the nearest ancestor directory holding the Cargo workspace.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "Cargo.toml"))
		if err == nil && bytes.Contains(data, []byte("[workspace]")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no Cargo workspace above the test directory; set STEPD_BIN")
		}
		dir = parent
	}
}

// daemon is one running stepd process.
type daemon struct {
	t      testing.TB
	cmd    *exec.Cmd
	addr   string // host:port
	unix   string // socket path, or ""
	exited chan struct{}
	stderr *lockedBuffer
	// stopOptions dial the Shutdown call (TLS options for a TLS daemon).
	stopOptions []stepd.Option
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

type daemonConfig struct {
	unixSocket bool
	extraArgs  []string
	// listen and dataDir, when set, replace the free port and the fresh
	// directory (a daemon restarted in place).
	listen  string
	dataDir string
}

// startDaemon starts stepd on a free loopback port with a fresh data
// directory, waits for its ready line, and stops it when the test ends.
func startDaemon(t testing.TB, cfg daemonConfig) *daemon {
	t.Helper()
	dataDir, listen := cfg.dataDir, cfg.listen
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	args := []string{"--listen", listen, "--data-dir", dataDir}
	if cfg.unixSocket {
		// Short path: socket paths are limited to about 100 bytes.
		sockDir, err := os.MkdirTemp("", "stepd-go")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(sockDir) })
		args = append(args, "--unix-socket", filepath.Join(sockDir, "stepd.sock"))
	} else {
		args = append(args, "--no-unix-socket")
	}
	args = append(args, cfg.extraArgs...)
	cmd := exec.Command(stepdBin, args...)
	// Only the flags configure this daemon: drop STEPD_* from the environment.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STEPD_") && !strings.HasPrefix(kv, "RUST_LOG=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "RUST_LOG=info")
	if root, err := repoRoot(); err == nil {
		// The project's debug adapters (debugpy's Python, dlv) come first, as
		// `scripts/tools --env` puts them.
		cmd.Env = append(cmd.Env, "PATH="+filepath.Join(root, ".tools", "venv", "bin")+":"+filepath.Join(root, ".tools", "bin")+":"+os.Getenv("PATH"))
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{t: t, cmd: cmd, exited: make(chan struct{}), stderr: &lockedBuffer{}}
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
			k, v, _ := strings.Cut(field, "=")
			switch k {
			case "tcp":
				d.addr = v
			case "unix":
				d.unix = v
			}
		}
	case <-d.exited:
		t.Fatalf("stepd exited before it was ready: %v\n%s", cmd.ProcessState, d.stderr)
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("stepd did not print its ready line within 30s\n%s", d.stderr)
	}
	if d.addr == "" {
		t.Fatalf("ready line without a tcp address")
	}
	t.Cleanup(d.stop)
	return d
}

// stop shuts the daemon down through the Shutdown RPC, then SIGTERM, then SIGKILL.
func (d *daemon) stop() {
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
	// The drain (5 s by default) and the exit, with room for a loaded
	// machine: a daemon that does not exit would not exit in a minute either.
	select {
	case <-d.exited:
	case <-time.After(60 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
		d.t.Errorf("stepd did not exit after Shutdown\n%s", d.stderr)
	}
	if d.t.Failed() {
		d.t.Logf("stepd stderr:\n%s", d.stderr)
	}
}

// dial connects a client to the daemon and closes it when the test ends.
func (d *daemon) dial(t testing.TB, opts ...stepd.Option) *stepd.Client {
	t.Helper()
	c, err := stepd.Dial(context.Background(), d.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dialAt connects a client to addr and closes it when the test ends.
func (d *daemon) dialAt(t testing.TB, addr string, opts ...stepd.Option) *stepd.Client {
	t.Helper()
	c, err := stepd.Dial(context.Background(), addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testContext is a context that ends with the test, at the latest after 60s.
func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
