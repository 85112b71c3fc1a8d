package probe_test

import (
	"context"
	"testing"
	"time"

	"github.com/stepd-dev/stepd/clients/go/internal/testpki"
	"github.com/stepd-dev/stepd/clients/go/probe"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

// A probe connects over mutual TLS to a daemon that requires client
// certificates (the refusals are TestDialMutualTLS's, in package stepd).
func TestConnectMutualTLS(t *testing.T) {
	pki := testpki.New(t)
	d := startDaemon(t, "", pki.ServerArgs()...)
	d.stopOptions = []stepd.Option{stepd.WithTLS(pki.Path("ca.pem"), pki.Path("client.pem"), pki.Path("client.key"))}

	p, err := probe.Connect(context.Background(), probe.Options{
		Name:        "tls-probe",
		Addr:        d.addr,
		TLSCA:       pki.Path("ca.pem"),
		TLSCert:     pki.Path("client.pem"),
		TLSKey:      pki.Path("client.key"),
		ConnectWait: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !p.Connected() || p.SessionID() == "" {
		t.Fatal("the probe was not welcomed over mTLS")
	}

}
