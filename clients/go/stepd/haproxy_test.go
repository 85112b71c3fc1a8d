package stepd_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// haproxy is a real HAProxy forwarding a free loopback port to one daemon,
// HTTP/2 without TLS on both sides, as a load balancer in front of stepd
// runs it.
type haproxy struct {
	addr string
}

// startHaproxy proxies a free port to backend (host:port) until the test ends.
func startHaproxy(t testing.TB, backend string) *haproxy {
	t.Helper()
	bin := "/usr/sbin/haproxy" // Debian's place, off most PATHs
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("haproxy"); err != nil {
			t.Fatal("haproxy is not installed (scripts/tools installs it)")
		}
	}
	addr := freeAddr(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "haproxy.cfg")
	text := "global\n  maxconn 200\n" +
		"defaults\n  mode http\n  timeout connect 1s\n  timeout client 60s\n" +
		"  timeout server 60s\n  timeout tunnel 60s\n" +
		"frontend grpc\n  bind " + addr + " proto h2\n  default_backend stepd\n" +
		"backend stepd\n  server daemon " + backend + " proto h2\n"
	if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-db", "-f", config)
	log := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start haproxy: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("haproxy output:\n%s", log)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return &haproxy{addr: addr}
		}
		select {
		case <-exited:
			t.Fatalf("haproxy exited: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("haproxy did not listen on %s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freeAddr is a loopback address with a port free at the time of the call.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
