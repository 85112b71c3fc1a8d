package stepd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
)

// DefaultAddr is the address of a local daemon when neither an address nor
// STEPD_ADDR is given.
const DefaultAddr = "127.0.0.1:7701"

// ProtocolVersion is the wire protocol this client speaks.
const ProtocolVersion = "stepd.v1"

// Client is a connection to one stepd daemon. It is safe for concurrent use.
type Client struct {
	conn       *grpc.ClientConn
	clientName string

	daemon      stepdv1.DaemonServiceClient
	sessions    stepdv1.SessionServiceClient
	breakpoints stepdv1.BreakpointServiceClient
	events      stepdv1.EventServiceClient
	inspector   stepdv1.InspectorServiceClient
	probe       stepdv1.ProbeServiceClient
	history     stepdv1.HistoryServiceClient
}

type options struct {
	clientName  string
	dialOptions []grpc.DialOption
	tlsCA       string
	tlsCert     string
	tlsKey      string
	tlsSet      bool
	tlsConfig   *tls.Config
	token       string
	tokenSet    bool
}

// Option configures [Dial].
type Option func(*options)

// WithClientName names this client to the daemon; the name shows up as `by`
// in pause_resolved events when this client answers a pause.
func WithClientName(name string) Option {
	return func(o *options) { o.clientName = name }
}

// WithDialOptions adds gRPC dial options (interceptors, connect parameters, ...).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOptions = append(o.dialOptions, opts...) }
}

// WithTLS makes the connection TLS: caFile (PEM) verifies the daemon's
// certificate (empty: the system's roots), certFile and keyFile (PEM, both or
// neither) present a client certificate for mutual TLS. Without this option
// $STEPD_TLS_CA, $STEPD_TLS_CERT and $STEPD_TLS_KEY are used when set.
func WithTLS(caFile, certFile, keyFile string) Option {
	return func(o *options) {
		o.tlsCA, o.tlsCert, o.tlsKey, o.tlsSet = caFile, certFile, keyFile, true
	}
}

// WithTLSConfig makes the connection TLS with this configuration (it wins
// over [WithTLS] and the environment).
func WithTLSConfig(config *tls.Config) Option {
	return func(o *options) { o.tlsConfig = config }
}

// WithToken sends "authorization: Bearer token" on every call. Without this
// option $STEPD_TOKEN is used, else, for the default local daemon only (no
// address and no $STEPD_ADDR), the daemon's <data dir>/token when it exists.
func WithToken(token string) Option {
	return func(o *options) { o.token, o.tokenSet = token, true }
}

// bearer is per-RPC credentials that work over plaintext too (a loopback
// daemon, or a mesh sidecar's mTLS).
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// DataDir is the default daemon's data directory: $STEPD_DATA_DIR, else
// $XDG_DATA_HOME/stepd, else ~/.local/share/stepd.
func DataDir() string {
	if d := os.Getenv("STEPD_DATA_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "stepd")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "share", "stepd")
}

func (o *options) resolveToken(defaultDaemon bool) string {
	if o.tokenSet {
		return strings.TrimSpace(o.token)
	}
	if t := strings.TrimSpace(os.Getenv("STEPD_TOKEN")); t != "" {
		return t
	}
	if defaultDaemon {
		if b, err := os.ReadFile(filepath.Join(DataDir(), "token")); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// transportCredentials: TLS for an https:// address, a [WithTLSConfig], or
// whenever a CA or client certificate is given (by option or environment) for
// a TCP address; plaintext otherwise.
func (o *options) transportCredentials(https, plain bool) (credentials.TransportCredentials, error) {
	if o.tlsConfig != nil {
		return credentials.NewTLS(o.tlsConfig), nil
	}
	ca, cert, key := o.tlsCA, o.tlsCert, o.tlsKey
	if !o.tlsSet {
		ca, cert, key = os.Getenv("STEPD_TLS_CA"), os.Getenv("STEPD_TLS_CERT"), os.Getenv("STEPD_TLS_KEY")
	}
	if !https && (plain || (ca == "" && cert == "")) {
		return insecure.NewCredentials(), nil
	}
	if (cert == "") != (key == "") {
		return nil, errors.New("stepd: a TLS client certificate needs its key, and the key its certificate")
	}
	config := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("stepd: TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("stepd: TLS CA %s: no PEM certificate in it", ca)
		}
		config.RootCAs = pool
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("stepd: TLS client certificate: %w", err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(config), nil
}

// Dial connects to the daemon at addr: "host:port", "https://host:port" or
// "unix:/path/stepd.sock". An empty addr means $STEPD_ADDR, else
// [DefaultAddr]. The connection is plaintext unless TLS is asked for (an
// https:// address, [WithTLS], [WithTLSConfig] or $STEPD_TLS_CA /
// $STEPD_TLS_CERT); see [WithToken] for the bearer token.
//
// Dial does not wait for the daemon; the first RPC does. Use [Client.Ping] as
// a handshake.
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	_ = ctx // connections are established lazily; kept for API stability.
	o := options{}
	for _, opt := range opts {
		opt(&o)
	}
	defaultDaemon := addr == "" && os.Getenv("STEPD_ADDR") == ""
	if addr == "" {
		addr = os.Getenv("STEPD_ADDR")
	}
	if addr == "" {
		addr = DefaultAddr
	}
	hostPort, https := strings.CutPrefix(addr, "https://")
	hostPort, plainScheme := strings.CutPrefix(hostPort, "http://")
	target := hostPort
	if !strings.HasPrefix(hostPort, "unix:") && !strings.Contains(hostPort, "://") {
		// "unix:/path" is gRPC target syntax already; a bare host:port is
		// dialled as is.
		target = "passthrough:///" + hostPort
	}
	creds, err := o.transportCredentials(https, plainScheme || strings.HasPrefix(hostPort, "unix:"))
	if err != nil {
		return nil, err
	}
	dialOptions := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// A local daemon that restarts should be found again quickly.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  100 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   3 * time.Second,
			},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	if o.clientName != "" {
		name := o.clientName
		dialOptions = append(dialOptions,
			grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
				return invoker(metadata.AppendToOutgoingContext(ctx, "x-stepd-client", name), method, req, reply, cc, callOpts...)
			}),
			grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
				return streamer(metadata.AppendToOutgoingContext(ctx, "x-stepd-client", name), desc, cc, method, callOpts...)
			}),
		)
	}
	if token := o.resolveToken(defaultDaemon); token != "" {
		dialOptions = append(dialOptions, grpc.WithPerRPCCredentials(bearer(token)))
	}
	dialOptions = append(dialOptions, o.dialOptions...)
	conn, err := grpc.NewClient(target, dialOptions...)
	if err != nil {
		return nil, fmt.Errorf("stepd: dial %s: %w", addr, err)
	}
	return NewClient(conn, o.clientName), nil
}

// NewClient wraps an existing gRPC connection to a daemon. clientName may be
// empty. Closing the returned Client closes conn.
func NewClient(conn *grpc.ClientConn, clientName string) *Client {
	return &Client{
		conn:        conn,
		clientName:  clientName,
		daemon:      stepdv1.NewDaemonServiceClient(conn),
		sessions:    stepdv1.NewSessionServiceClient(conn),
		breakpoints: stepdv1.NewBreakpointServiceClient(conn),
		events:      stepdv1.NewEventServiceClient(conn),
		inspector:   stepdv1.NewInspectorServiceClient(conn),
		probe:       stepdv1.NewProbeServiceClient(conn),
		history:     stepdv1.NewHistoryServiceClient(conn),
	}
}

// Close closes the connection. Open subscriptions end.
func (c *Client) Close() error { return c.conn.Close() }

// Conn is the underlying gRPC connection.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// DaemonService is the generated DaemonService client.
func (c *Client) DaemonService() stepdv1.DaemonServiceClient { return c.daemon }

// SessionService is the generated SessionService client.
func (c *Client) SessionService() stepdv1.SessionServiceClient { return c.sessions }

// BreakpointService is the generated BreakpointService client.
func (c *Client) BreakpointService() stepdv1.BreakpointServiceClient { return c.breakpoints }

// EventService is the generated EventService client (the raw Subscribe stream;
// [Client.Subscribe] adds resumption).
func (c *Client) EventService() stepdv1.EventServiceClient { return c.events }

// Inspector is the generated InspectorService client.
func (c *Client) Inspector() stepdv1.InspectorServiceClient { return c.inspector }

// Probe is the generated ProbeService client.
func (c *Client) Probe() stepdv1.ProbeServiceClient { return c.probe }

// HistoryService is the generated HistoryService client ([Client.SessionHistory]
// follows its pages).
func (c *Client) HistoryService() stepdv1.HistoryServiceClient { return c.history }

// ---- DaemonService ----

// Ping is the handshake: version, protocol version, instance id, uptime.
func (c *Client) Ping(ctx context.Context) (*stepdv1.PingResponse, error) {
	resp, err := c.daemon.Ping(ctx, &stepdv1.PingRequest{})
	return resp, wrap(err)
}

// GetStatus returns the daemon's counts and addresses.
func (c *Client) GetStatus(ctx context.Context) (*stepdv1.GetStatusResponse, error) {
	resp, err := c.daemon.GetStatus(ctx, &stepdv1.GetStatusRequest{})
	return resp, wrap(err)
}

// GetVersion returns build information.
func (c *Client) GetVersion(ctx context.Context) (*stepdv1.GetVersionResponse, error) {
	resp, err := c.daemon.GetVersion(ctx, &stepdv1.GetVersionRequest{})
	return resp, wrap(err)
}

// Doctor checks adapters, the store and the configuration.
func (c *Client) Doctor(ctx context.Context) (*stepdv1.DoctorResponse, error) {
	resp, err := c.daemon.Doctor(ctx, &stepdv1.DoctorRequest{})
	return resp, wrap(err)
}

// Shutdown asks the daemon to stop gracefully. It returns once the daemon
// accepted; open streams then end and the process exits.
func (c *Client) Shutdown(ctx context.Context) error {
	_, err := c.daemon.Shutdown(ctx, &stepdv1.ShutdownRequest{})
	return wrap(err)
}

// ---- BreakpointService ----

// ListBreakpoints lists breakpoints in creation order. With forLabels, only
// those whose label selector would apply to a session with these labels.
func (c *Client) ListBreakpoints(ctx context.Context, forLabels map[string]string) ([]*stepdv1.Breakpoint, error) {
	resp, err := c.breakpoints.ListBreakpoints(ctx, &stepdv1.ListBreakpointsRequest{ForLabels: forLabels})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetBreakpoints(), nil
}

// AddBreakpoint validates and stores a new breakpoint; see [SourceBreakpoint]
// and the other constructors.
func (c *Client) AddBreakpoint(ctx context.Context, spec *stepdv1.BreakpointSpec) (*stepdv1.Breakpoint, error) {
	resp, err := c.breakpoints.AddBreakpoint(ctx, &stepdv1.AddBreakpointRequest{Spec: spec})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetBreakpoint(), nil
}

// RemoveBreakpoint removes a breakpoint and returns it as it was.
func (c *Client) RemoveBreakpoint(ctx context.Context, id string) (*stepdv1.Breakpoint, error) {
	resp, err := c.breakpoints.RemoveBreakpoint(ctx, &stepdv1.RemoveBreakpointRequest{Id: id})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetBreakpoint(), nil
}

// UpdateBreakpoint changes the fields of a breakpoint's spec named by paths
// (e.g. "enabled", "condition", "source"); with no paths the whole spec is
// replaced.
func (c *Client) UpdateBreakpoint(ctx context.Context, id string, spec *stepdv1.BreakpointSpec, paths ...string) (*stepdv1.Breakpoint, error) {
	req := &stepdv1.UpdateBreakpointRequest{Id: id, Spec: spec}
	if len(paths) > 0 {
		req.UpdateMask = &fieldmaskpb.FieldMask{Paths: paths}
	}
	resp, err := c.breakpoints.UpdateBreakpoint(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetBreakpoint(), nil
}

// SetBreakpointEnabled enables or disables a breakpoint.
func (c *Client) SetBreakpointEnabled(ctx context.Context, id string, enabled bool) (*stepdv1.Breakpoint, error) {
	return c.UpdateBreakpoint(ctx, id, &stepdv1.BreakpointSpec{Enabled: &enabled}, "enabled")
}
