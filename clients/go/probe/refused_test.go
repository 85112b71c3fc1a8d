package probe_test

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepd-dev/stepd/clients/go/probe"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

// addToken adds a token line to the tokens file and answers the token.
func addToken(t testing.TB, file, name, role string) string {
	t.Helper()
	out, err := exec.Command(stepdBin, "token", "add", name, role, "--file", file).Output()
	if err != nil {
		t.Fatalf("stepd token add: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// A probe whose credentials a real daemon (--auth-tokens) refuses tells the
// program once — Options.OnRefused, one log line, Refusal and
// WaitConnected — and tries again at its longest backoff, not in a busy
// loop: a wrong token, an expired one, one revoked while connected.
func TestRefusedCredentialsAreToldOnce(t *testing.T) {
	var logs lockedBuffer
	previous := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(previous) })

	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	admin := addToken(t, tokens, "admin", "admin")
	d := startDaemon(t, "", "--auth-tokens", tokens)
	d.stopOptions = []stepd.Option{stepd.WithToken(admin)}

	expired := addToken(t, tokens, "old-probe", "probe")
	text, err := os.ReadFile(tokens)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(text), "\n"), "\n")
	for i, line := range lines {
		if strings.HasPrefix(line, "old-probe ") {
			lines[i] = line + " expires=2001-01-01T00:00:00Z"
		}
	}
	if err := os.WriteFile(tokens, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	revoked := addToken(t, tokens, "agent", "probe")

	for _, tc := range []struct {
		name, token string
		want        error
		revoke      bool
	}{
		{"wrong", "not-a-token", stepd.ErrUnauthenticated, false},
		{"expired", expired, stepd.ErrTokenExpired, false},
		{"revoked", revoked, stepd.ErrUnauthenticated, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			before := strings.Count(logs.String(), "refuses its credentials")
			var mu sync.Mutex
			var told []error
			toldCh := make(chan struct{}, 16)
			p, err := probe.Connect(ctx, probe.Options{
				Name:              "refused-" + tc.name,
				Addr:              d.addr,
				Token:             tc.token,
				ConnectWait:       -1,
				OnRefused:         func(err error) { mu.Lock(); told = append(told, err); mu.Unlock(); toldCh <- struct{}{} },
				ReconnectDeadline: time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if tc.revoke {
				if err := p.WaitConnected(ctx); err != nil {
					t.Fatalf("the valid token was refused: %v", err)
				}
				if out, err := exec.Command(stepdBin, "token", "remove", "agent", "--file", tokens).CombinedOutput(); err != nil {
					t.Fatalf("stepd token remove: %v %s", err, out)
				}
			}
			select {
			case <-toldCh:
			case <-ctx.Done():
				t.Fatal("the program was never told")
			}
			toldAt, attempts := time.Now(), p.Attempts()
			if !errors.Is(p.Refusal(), tc.want) || p.Connected() {
				t.Fatalf("refusal %v (want %v), connected %v", p.Refusal(), tc.want, p.Connected())
			}
			if err := p.WaitConnected(ctx); !errors.Is(err, tc.want) {
				t.Fatalf("WaitConnected: %v, want %v", err, tc.want)
			}
			// It tries again, and only after its longest backoff.
			for p.Attempts() < attempts+1 {
				select {
				case <-ctx.Done():
					t.Fatal("the probe stopped trying")
				case <-time.After(20 * time.Millisecond):
				}
			}
			if took := time.Since(toldAt); took < 2*time.Second {
				t.Fatalf("tried again within %v: a busy loop", took)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(told) != 1 {
				t.Fatalf("told %d times: %v", len(told), told)
			}
			if n := strings.Count(logs.String(), "refuses its credentials") - before; n != 1 {
				t.Fatalf("%d log lines:\n%s", n, logs.String())
			}
		})
	}
}
