package stepd_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stepd-dev/stepd/clients/go/internal/testpki"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

// A daemon that requires client certificates: Dial with the CA's client
// certificate works, over a bare address and an https:// one; without a
// certificate, or with one from another CA, or in plaintext, it does not.
func TestDialMutualTLS(t *testing.T) {
	pki := testpki.New(t)
	d := startDaemon(t, daemonConfig{extraArgs: pki.ServerArgs()})
	good := stepd.WithTLS(pki.Path("ca.pem"), pki.Path("client.pem"), pki.Path("client.key"))
	d.stopOptions = []stepd.Option{good}

	for _, addr := range []string{d.addr, "https://" + d.addr} {
		if _, err := d.dialAt(t, addr, good).Ping(testContext(t)); err != nil {
			t.Fatalf("ping %s over mTLS: %v", addr, err)
		}
	}
	refused := map[string][]stepd.Option{
		"no client certificate": {stepd.WithTLS(pki.Path("ca.pem"), "", "")},
		"another CA's":          {stepd.WithTLS(pki.Path("ca.pem"), pki.Path("other.pem"), pki.Path("other.key"))},
		"plaintext":             nil,
		"a token is not enough": {stepd.WithToken("secret")},
	}
	for what, opts := range refused {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := d.dialAt(t, d.addr, opts...).Ping(ctx); err == nil {
			t.Errorf("%s: ping succeeded against a daemon requiring client certificates", what)
		}
		cancel()
	}
	if _, err := stepd.Dial(context.Background(), d.addr, stepd.WithTLS(pki.Path("ca.pem"), pki.Path("client.pem"), "")); err == nil {
		t.Error("a client certificate without its key was accepted")
	}
}

// The STEPD_TLS_* variables configure Dial when no option does.
func TestDialTLSFromEnvironment(t *testing.T) {
	pki := testpki.New(t)
	d := startDaemon(t, daemonConfig{extraArgs: pki.ServerArgs()})
	d.stopOptions = []stepd.Option{stepd.WithTLS(pki.Path("ca.pem"), pki.Path("client.pem"), pki.Path("client.key"))}
	t.Setenv("STEPD_TLS_CA", pki.Path("ca.pem"))
	t.Setenv("STEPD_TLS_CERT", pki.Path("client.pem"))
	t.Setenv("STEPD_TLS_KEY", pki.Path("client.key"))
	if _, err := d.dialAt(t, d.addr).Ping(testContext(t)); err != nil {
		t.Fatalf("ping with STEPD_TLS_*: %v", err)
	}
}

// A token the daemon does not know is refused, even from the daemon's own
// user (a client that sends a token means it), and DataDir (where the
// default daemon's token file is read) follows STEPD_DATA_DIR.
func TestAnUnknownTokenIsRefusedAndDataDirFollowsTheEnvironment(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("local-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STEPD_DATA_DIR", dir)
	t.Setenv("STEPD_ADDR", d.addr)
	_, err := d.dialAt(t, "", stepd.WithToken("explicit")).Ping(testContext(t))
	var se *stepd.Error
	if !errors.As(err, &se) || se.ReasonName != "UNAUTHENTICATED" {
		t.Fatalf("ping with an unknown token: %v, want UNAUTHENTICATED", err)
	}
	if got := stepd.DataDir(); got != dir {
		t.Fatalf("DataDir() = %q, want %q", got, dir)
	}
}
