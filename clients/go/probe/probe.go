package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

// ErrSkipped is returned by a point whose held call must not be performed
// (the SKIP command).
var ErrSkipped = errors.New("stepd probe: skipped")

// ErrStopped is returned by a point when a client asked the program to stop
// (the QUIT command).
var ErrStopped = errors.New("stepd probe: stopped")

// DefaultFlushInterval is how long an observed report waits, at most, for
// the ones after it to be sent in the same message: about five of them for
// a program observing 50 points a second.
const DefaultFlushInterval = 100 * time.Millisecond

// Options configure [Connect].
type Options struct {
	// Name of the program, shown as the session's name.
	Name string
	// Labels select breakpoints (label selectors) and are shown with the
	// session. They are laid over [EnvironmentLabels] (pod, namespace, node,
	// app) unless NoEnvironmentLabels is set.
	Labels map[string]string
	// NoEnvironmentLabels leaves out the labels taken from the environment.
	NoEnvironmentLabels bool
	// Addr of the daemon: "host:port" or "unix:/path/stepd.sock"; empty means
	// $STEPD_ADDR, else [stepd.DefaultAddr].
	Addr string
	// Eval evaluates code sent by EVAL while a point holds. Nil: the probe
	// declares no evaluator and EVAL is not offered. A hold can bring its own
	// with [Evaluator].
	Eval func(code string) (string, error)
	// ConnectWait is how long Connect waits for the first session (default
	// 2s; negative: do not wait). The probe keeps trying in the background
	// either way; until it is connected its points do not hold.
	ConnectWait time.Duration
	// ReportBuffer bounds the reports (observed, enlighten, trace) waiting to
	// be sent (default 16384). When it is full the oldest is dropped and
	// counted in Reports.dropped, which the daemon turns into a gap event.
	ReportBuffer int
	// FlushInterval is how long a report may wait to be sent with the ones
	// after it (default [DefaultFlushInterval]). A hold, and any other
	// message, sends what waits first, so it never delays a pause.
	FlushInterval time.Duration
	// DialOptions are extra gRPC dial options.
	DialOptions []grpc.DialOption
	// TLSCA, TLSCert and TLSKey are PEM files as for [stepd.WithTLS]: when
	// any is set the connection is TLS (mutual with TLSCert and TLSKey).
	// All empty: $STEPD_TLS_CA, $STEPD_TLS_CERT and $STEPD_TLS_KEY apply.
	TLSCA, TLSCert, TLSKey string
	// Token is sent as "authorization: Bearer Token" (see [stepd.WithToken];
	// empty: $STEPD_TOKEN, else the local daemon's token file).
	Token string
	// Traceparent is the W3C traceparent the probe's session span is a
	// child of. Empty: the OpenTelemetry span in Connect's ctx, if any, else
	// $TRACEPARENT.
	Traceparent string
	// ReleaseOnDisconnect makes a hold go on with its original value as
	// soon as the stream drops, as if CONTINUE had been answered. By default
	// the program keeps waiting and the hold is re-reported to the daemon
	// the probe reconnects to (a restarted one or another instance), within
	// ReconnectDeadline and the daemon's hold limit.
	ReleaseOnDisconnect bool
	// ReconnectDeadline is how long held points wait for a daemon to come
	// back after the stream dropped before they go on with their original
	// values (default 60s).
	ReconnectDeadline time.Duration
	// HeartbeatInterval is how often each side sends a heartbeat on a quiet
	// stream, so that proxies do not cut it (0: the daemon's
	// --heartbeat-interval, sent in Welcome; the daemon clamps it to 1s-1h).
	HeartbeatInterval time.Duration
	// OnRefused is called, from the probe's goroutine, when the daemon
	// refuses the probe's credentials: codes.Unauthenticated (a wrong,
	// expired or revoked token; [stepd.ErrUnauthenticated],
	// [stepd.ErrTokenExpired]) or codes.PermissionDenied (a role that may
	// not connect probes). It is called once, with a log line (slog, warn),
	// until the daemon welcomes the probe again; meanwhile the probe keeps
	// trying at its longest backoff, so a new token on the daemon's side is
	// picked up. [Probe.Refusal] says the same at any time.
	OnRefused func(err error)
}

// Probe is one instrumented process's connection to stepd. It is safe for
// concurrent use by any number of goroutines. A nil *Probe is valid: its
// points never hold.
type Probe struct {
	opts   Options
	client *stepd.Client
	labels map[string]string
	// traceparent and tracestate go with every Hello (read once, in Connect).
	traceparent, tracestate string

	// armed is the current arming; nil while disconnected.
	armed atomic.Pointer[arming]
	// top counts the points at depth 0.
	top    atomic.Int32
	hitSeq atomic.Uint64
	gen    atomic.Uint64

	mu        sync.Mutex
	conn      *conn
	sessionID string
	changed   chan struct{} // closed and replaced when the connection state changes
	refused   uint64        // holds the daemon refused
	refusal   error         // why the daemon refuses the credentials, while it does
	attempts  uint64        // streams tried, welcomed or not
	// held are the points waiting for their Resume, by hit id; they outlive
	// a stream unless Options.ReleaseOnDisconnect.
	held map[string]*waiter
	// holdLimit is the daemon's (from Welcome): it also bounds a hold kept
	// while disconnected.
	holdLimit time.Duration
	// heartbeat is the quiet time after which the stream gets a heartbeat.
	heartbeat time.Duration

	reports reportBuffer
	// kick says a batch's worth of reports is buffered. flushTimer is
	// armed by the report that finds the buffer empty, so the writer wakes
	// once per flush, not once more for each report that starts a batch.
	kick       chan struct{}
	flushTimer *time.Timer

	ctx       context.Context
	cancel    context.CancelFunc
	closing   chan struct{}
	closeOnce sync.Once
	runDone   chan struct{}
}

// conn is one live Connect stream.
type conn struct {
	gen   uint64
	sendq chan *stepdv1.ConnectRequest
	done  chan struct{}
}

type waiter struct {
	ch   chan *stepdv1.Resume
	eval func(code string) (string, error)
	// hit is what was sent, re-reported with HeldSince after a reconnect.
	hit *stepdv1.Hit
	// since is when the program began to wait.
	since time.Time
}

// Connect starts a probe: it connects to the daemon, says Hello and keeps
// the connection, reconnecting with backoff when it drops. It waits for the
// first session at most Options.ConnectWait or until ctx is done, then
// returns; it fails only for unusable options. Close the probe when done.
func Connect(ctx context.Context, opts Options) (*Probe, error) {
	if opts.Name == "" {
		opts.Name = os.Args[0]
	}
	if opts.ConnectWait == 0 {
		opts.ConnectWait = 2 * time.Second
	}
	if opts.ReportBuffer <= 0 {
		opts.ReportBuffer = 16384
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.ReconnectDeadline <= 0 {
		opts.ReconnectDeadline = 60 * time.Second
	}
	dial := []stepd.Option{stepd.WithDialOptions(opts.DialOptions...)}
	if opts.TLSCA != "" || opts.TLSCert != "" || opts.TLSKey != "" {
		dial = append(dial, stepd.WithTLS(opts.TLSCA, opts.TLSCert, opts.TLSKey))
	}
	if opts.Token != "" {
		dial = append(dial, stepd.WithToken(opts.Token))
	}
	client, err := stepd.Dial(ctx, opts.Addr, dial...)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{}
	if !opts.NoEnvironmentLabels {
		labels = EnvironmentLabels()
	}
	for k, v := range opts.Labels {
		labels[k] = v
	}
	bg, cancel := context.WithCancel(context.Background())
	p := &Probe{
		opts:      opts,
		client:    client,
		labels:    labels,
		changed:   make(chan struct{}),
		held:      make(map[string]*waiter),
		holdLimit: time.Hour,
		heartbeat: 30 * time.Second,
		kick:      make(chan struct{}, 1),
		flushTimer: func() *time.Timer {
			t := time.NewTimer(time.Hour)
			t.Stop()
			return t
		}(),
		ctx:     bg,
		cancel:  cancel,
		closing: make(chan struct{}),
		runDone: make(chan struct{}),
	}
	p.traceparent, p.tracestate = helloTrace(ctx, opts.Traceparent)
	p.reports.init(opts.ReportBuffer)
	go p.run()
	if opts.ConnectWait > 0 {
		wctx, wcancel := context.WithTimeout(ctx, opts.ConnectWait)
		_ = p.WaitConnected(wctx)
		wcancel()
	}
	return p, nil
}

// Close flushes the buffered reports, ends the session and closes the
// connection. Points reached after Close never hold.
func (p *Probe) Close() error {
	if p == nil {
		return nil
	}
	p.closeOnce.Do(func() {
		close(p.closing)
		select {
		case <-p.runDone:
		case <-time.After(2 * time.Second):
		}
		p.cancel()
		<-p.runDone
		p.client.Close()
	})
	return nil
}

// Refused is how many holds the daemon refused (its limits on pending
// holds); those points went on at once, as if not armed.
func (p *Probe) Refused() uint64 {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

// Refusal is why the daemon refuses the probe's credentials (an *stepd.Error
// with codes.Unauthenticated or codes.PermissionDenied) while it does; nil
// once it welcomes the probe. See [Options.OnRefused].
func (p *Probe) Refusal() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refusal
}

// Attempts is how many times the probe tried to open its stream, welcomed
// or not.
func (p *Probe) Attempts() uint64 {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attempts
}

// Connected reports whether the probe has a live session.
func (p *Probe) Connected() bool {
	return p != nil && p.armed.Load() != nil
}

// SessionID is the id of the current (or last) session; empty before the
// first.
func (p *Probe) SessionID() string {
	if p == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sessionID
}

// Armed is a copy of the arming in force, nil while disconnected.
func (p *Probe) Armed() *stepdv1.Armed {
	if p == nil {
		return nil
	}
	a := p.armed.Load()
	if a == nil {
		return nil
	}
	return proto.Clone(a.raw).(*stepdv1.Armed)
}

// WaitConnected blocks until the probe has a live session or ctx is done;
// it returns [Probe.Refusal] at once when the daemon refuses the probe's
// credentials.
func (p *Probe) WaitConnected(ctx context.Context) error {
	if p == nil {
		return errors.New("stepd probe: nil probe")
	}
	for {
		p.mu.Lock()
		ok := p.conn != nil
		ch := p.changed
		refusal := p.refusal
		p.mu.Unlock()
		if ok {
			return nil
		}
		if refusal != nil {
			return refusal
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-p.closing:
			return errors.New("stepd probe: closed")
		}
	}
}

func (p *Probe) notifyChanged() {
	// p.mu held.
	close(p.changed)
	p.changed = make(chan struct{})
}

// ----- the connection loop ----------------------------------------------------

const (
	minBackoff    = 50 * time.Millisecond
	maxBackoff    = 3 * time.Second
	helloDeadline = 10 * time.Second
)

func (p *Probe) run() {
	defer close(p.runDone)
	// Closed: no daemon will answer the holds kept for one.
	defer p.release(func(*waiter) bool { return true })
	backoff := minBackoff
	for {
		select {
		case <-p.closing:
			return
		default:
		}
		welcomed, refused := p.session()
		if welcomed {
			backoff = minBackoff
		}
		if refused != nil {
			// Retrying faster will not change the daemon's mind; an
			// operator's new token will.
			p.tellRefused(refused)
			backoff = maxBackoff
		}
		select {
		case <-p.closing:
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// tellRefused records a refusal of the credentials and says so once: a log
// line and Options.OnRefused, until a Welcome clears it.
func (p *Probe) tellRefused(err error) {
	select {
	case <-p.closing:
		return
	default:
	}
	p.mu.Lock()
	first := p.refusal == nil
	p.refusal = err
	p.notifyChanged()
	p.mu.Unlock()
	if !first {
		return
	}
	slog.Warn("stepd probe: the daemon refuses its credentials; its points do not hold until it accepts them",
		"probe", p.opts.Name, "addr", p.opts.Addr, "err", err)
	if p.opts.OnRefused != nil {
		p.opts.OnRefused(err)
	}
}

// refusal is err as an *stepd.Error when it is a refusal of the
// credentials, else nil.
func refusal(err error) error {
	var e *stepd.Error
	if errors.As(stepd.FromError(err), &e) && (e.Code == codes.Unauthenticated || e.Code == codes.PermissionDenied) {
		return e
	}
	return nil
}

// session runs one Connect stream until it ends; it reports whether the
// daemon welcomed the probe, and its refusal of the credentials if it
// refused them.
func (p *Probe) session() (bool, error) {
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	p.mu.Lock()
	p.attempts++
	p.mu.Unlock()
	stream, err := p.client.Probe().Connect(ctx)
	if err != nil {
		return false, refusal(err)
	}
	host, _ := os.Hostname()
	p.mu.Lock()
	previous := p.sessionID
	p.mu.Unlock()
	hello := &stepdv1.Hello{
		Name:     p.opts.Name,
		Language: "go",
		Pid:      int64(os.Getpid()),
		Host:     host,
		Labels:   p.labels,
		Capabilities: &stepdv1.ProbeCapabilities{
			Eval: p.opts.Eval != nil,
			Skip: true,
			Edit: true,
		},
		ResumeSessionId: previous,
		Traceparent:     p.traceparent,
		Tracestate:      p.tracestate,
	}
	if p.opts.HeartbeatInterval > 0 {
		hello.HeartbeatInterval = durationpb.New(p.opts.HeartbeatInterval)
	}
	if err := stream.Send(&stepdv1.ConnectRequest{Message: &stepdv1.ConnectRequest_Hello{Hello: hello}}); err != nil {
		// The real error is the stream's status.
		_, err = stream.Recv()
		return false, refusal(err)
	}
	timer := time.AfterFunc(helloDeadline, cancel)
	first, err := stream.Recv()
	timer.Stop()
	if err != nil {
		return false, refusal(err)
	}
	if first.GetWelcome() == nil {
		return false, nil
	}
	welcome := first.GetWelcome()
	gen := p.gen.Add(1)
	c := &conn{
		gen:   gen,
		sendq: make(chan *stepdv1.ConnectRequest, 64),
		done:  make(chan struct{}),
	}
	p.armed.Store(compileArmed(welcome.GetArmed(), gen))
	p.mu.Lock()
	p.conn = c
	p.refusal = nil
	p.sessionID = welcome.GetSessionId()
	if d := welcome.GetHoldLimit(); d != nil {
		p.holdLimit = d.AsDuration()
	}
	p.heartbeat = p.opts.HeartbeatInterval
	if d := welcome.GetHeartbeatInterval(); p.heartbeat <= 0 && d != nil && d.AsDuration() > 0 {
		p.heartbeat = d.AsDuration()
	}
	if p.heartbeat <= 0 {
		p.heartbeat = 30 * time.Second
	}
	// Holds kept across the lost stream are reported again, with when
	// they began, so the pause reappears here and can be answered.
	var again []*stepdv1.ConnectRequest
	for _, w := range p.held {
		hit := proto.Clone(w.hit).(*stepdv1.Hit)
		hit.HeldSince = timestamppb.New(w.since)
		again = append(again, &stepdv1.ConnectRequest{Message: &stepdv1.ConnectRequest_Hit{Hit: hit}})
	}
	p.notifyChanged()
	p.mu.Unlock()
	go func() {
		for _, m := range again {
			p.send(c, m)
		}
	}()

	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		p.writer(stream, c, cancel)
	}()
	for {
		m, err := stream.Recv()
		if err != nil {
			break
		}
		p.handle(c, m)
	}
	// The stream is gone: points stop holding. Held points keep waiting
	// for a daemon to come back (never longer than the reconnect deadline
	// or their hold limit: the program never hangs on a dead daemon), or go
	// on at once as if CONTINUE had been answered.
	p.armed.Store(nil)
	p.mu.Lock()
	p.conn = nil
	p.notifyChanged()
	p.mu.Unlock()
	close(c.done)
	select {
	case <-p.closing:
	default:
		if !p.opts.ReleaseOnDisconnect {
			go p.reap(time.Now(), gen)
			break
		}
		p.release(func(*waiter) bool { return true })
	}
	cancel()
	<-writerDone
	return true, nil
}

// release lets the held points for which pick is true go on as if CONTINUE
// had been answered.
func (p *Probe) release(pick func(*waiter) bool) {
	p.mu.Lock()
	var goOn []*waiter
	for id, w := range p.held {
		if pick(w) {
			delete(p.held, id)
			goOn = append(goOn, w)
		}
	}
	p.mu.Unlock()
	for _, w := range goOn {
		w.ch <- &stepdv1.Resume{HitId: w.hit.GetHitId(), Decision: stepdv1.ResumeDecision_RESUME_DECISION_CONTINUE}
	}
}

// reap runs while the probe is disconnected since lost, the end of
// connection gen: it releases each held point once its hold limit passed,
// and all of them at the reconnect deadline; it stops when the probe
// reconnects (a later loss has a reaper of its own) or closes.
func (p *Probe) reap(lost time.Time, gen uint64) {
	giveUp := lost.Add(p.opts.ReconnectDeadline)
	for {
		p.mu.Lock()
		connected, changed, limit := p.conn != nil, p.changed, p.holdLimit
		p.mu.Unlock()
		if connected || p.gen.Load() != gen {
			return
		}
		now := time.Now()
		p.release(func(w *waiter) bool { return !now.Before(giveUp) || !now.Before(w.since.Add(limit)) })
		p.mu.Lock()
		next := giveUp
		for _, w := range p.held {
			if end := w.since.Add(limit); end.Before(next) {
				next = end
			}
		}
		left := len(p.held)
		p.mu.Unlock()
		if left == 0 {
			return
		}
		timer := time.NewTimer(time.Until(next))
		select {
		case <-timer.C:
		case <-changed:
		case <-p.closing:
			// run releases what is left as it returns.
			timer.Stop()
			return
		}
		timer.Stop()
	}
}

func (p *Probe) handle(c *conn, m *stepdv1.ConnectResponse) {
	switch msg := m.GetMessage().(type) {
	case *stepdv1.ConnectResponse_Armed:
		p.armed.Store(compileArmed(msg.Armed, c.gen))
	case *stepdv1.ConnectResponse_Resume:
		r := msg.Resume
		if r.GetArmed() != nil {
			// The arming after the resume is in force before the program goes on.
			p.armed.Store(compileArmed(r.GetArmed(), c.gen))
		}
		p.mu.Lock()
		w := p.held[r.GetHitId()]
		delete(p.held, r.GetHitId())
		p.mu.Unlock()
		if w != nil {
			w.ch <- r
		}
	case *stepdv1.ConnectResponse_Refused:
		// The daemon did not hold it (too many holds pending): the point
		// goes on with its value, as if it were not armed.
		r := msg.Refused
		p.mu.Lock()
		w := p.held[r.GetHitId()]
		delete(p.held, r.GetHitId())
		p.refused++
		p.mu.Unlock()
		if w != nil {
			w.ch <- &stepdv1.Resume{HitId: r.GetHitId(), Decision: stepdv1.ResumeDecision_RESUME_DECISION_CONTINUE}
		}
	case *stepdv1.ConnectResponse_Eval:
		e := msg.Eval
		p.mu.Lock()
		w := p.held[e.GetHitId()]
		p.mu.Unlock()
		eval := p.opts.Eval
		if w != nil && w.eval != nil {
			eval = w.eval
		}
		go func() {
			result := &stepdv1.EvalResult{EvalId: e.GetEvalId()}
			switch {
			case w == nil:
				result.Error = "the point is no longer held"
			case eval == nil:
				result.Error = "this probe has no evaluator"
			default:
				v, err := safeCall(eval, e.GetCode())
				if err != nil {
					result.Error = err.Error()
				} else {
					result.Value = v
					if sv, err := structpb.NewValue(toJSONValue(jsonOrString(v))); err == nil {
						result.Structured = sv
					}
				}
			}
			p.send(c, &stepdv1.ConnectRequest{Message: &stepdv1.ConnectRequest_EvalResult{EvalResult: result}})
		}()
	}
}

func safeCall(eval func(string) (string, error), code string) (v string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the evaluator panicked: %v", r)
		}
	}()
	return eval(code)
}

// send queues a message on c; false when c is gone.
func (p *Probe) send(c *conn, m *stepdv1.ConnectRequest) bool {
	select {
	case c.sendq <- m:
		return true
	case <-c.done:
		return false
	}
}

// writer is the only goroutine that sends on the stream: queued messages
// first, then report batches on a timer or when the buffer fills up.
func (p *Probe) writer(stream stepdv1.ProbeService_ConnectClient, c *conn, cancel context.CancelFunc) {
	p.mu.Lock()
	heartbeat := p.heartbeat
	p.mu.Unlock()
	// The flush timer runs only while reports wait, so an idle probe's
	// writer sleeps until its next heartbeat check instead of waking
	// every FlushInterval. Reports kept while disconnected go soon.
	if p.reports.len() > 0 {
		p.flushTimer.Reset(p.opts.FlushInterval)
	}
	// Checked four times a heartbeat, so a quiet stream goes at most 1.25
	// heartbeats without sending.
	idle := time.NewTicker(max(heartbeat/4, time.Millisecond))
	defer idle.Stop()
	lastSent := time.Now()
	flush := func(all bool) bool {
		for {
			batch, ok := p.reports.take(reportBatch)
			if !ok {
				return true
			}
			lastSent = time.Now()
			if err := stream.Send(&stepdv1.ConnectRequest{Message: &stepdv1.ConnectRequest_Reports{Reports: batch}}); err != nil {
				// Never silent: what was in flight counts as dropped.
				p.reports.addDropped(uint64(len(batch.Observed)+len(batch.Enlighten)+len(batch.Trace)) + batch.Dropped)
				return false
			}
			if !all && p.reports.len() < reportBatch {
				return true
			}
		}
	}
	for {
		select {
		case m := <-c.sendq:
			// Reports buffered before a Hit (or any other message) go
			// first, so a point observed before a hold is never shown
			// after its pause.
			if !flush(true) {
				cancel()
				return
			}
			lastSent = time.Now()
			if err := stream.Send(m); err != nil {
				cancel()
				return
			}
		case <-p.flushTimer.C:
			if !flush(false) {
				cancel()
				return
			}
			if p.reports.len() > 0 {
				p.flushTimer.Reset(p.opts.FlushInterval)
			}
		case <-idle.C:
			// A quiet stream gets a heartbeat, so proxies do not cut it.
			if time.Since(lastSent) >= heartbeat {
				lastSent = time.Now()
				hb := &stepdv1.ConnectRequest{Message: &stepdv1.ConnectRequest_Heartbeat{Heartbeat: &stepdv1.Heartbeat{}}}
				if err := stream.Send(hb); err != nil {
					cancel()
					return
				}
			}
		case <-p.kick:
			if !flush(false) {
				cancel()
				return
			}
		case <-p.closing:
			// Flush the reports, then what is queued (reports first, as
			// above), and end the stream politely: the daemon ends the session.
			flush(true)
			for {
				select {
				case m := <-c.sendq:
					_ = stream.Send(m)
					continue
				default:
				}
				break
			}
			_ = stream.CloseSend()
			<-c.done
			return
		case <-c.done:
			return
		}
	}
}
