package stepd

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
)

// WatchOptions selects what a [Subscription] receives.
type WatchOptions struct {
	// SessionIDs to follow; empty means every session and the daemon-level
	// events (e.g. breakpoint list changes).
	SessionIDs []string
	// Channels to follow; empty means all. Snapshot, gap, heartbeat and
	// error events are always delivered.
	Channels []stepdv1.EventChannel
	// ClientName is shown as `by` in pause_resolved when this subscription
	// answers a pause; empty means the client's name.
	ClientName string
	// ResumeAfterSeq and ResumeInstanceID start from a cursor saved earlier
	// (see [Subscription.Cursor]) instead of a snapshot: the daemon replays
	// the events after it, or sends a gap event and a fresh snapshot when it
	// no longer holds them (or the cursor is from another daemon instance).
	ResumeAfterSeq   uint64
	ResumeInstanceID string
	// Buffer is the capacity of the events channel (default 256). A consumer
	// that does not keep up eventually gets a gap event and a fresh snapshot
	// from the daemon; nothing is lost silently.
	Buffer int
	// MaxBackoff bounds the wait between reconnection attempts (default 2s).
	MaxBackoff time.Duration
	// FollowRestarts keeps the subscription going when the daemon ends the
	// stream because it shuts down: it waits (with backoff, until its
	// context ends) for the daemon that comes back on the same address, or
	// behind the same load balancer, which answers with a gap event and its
	// snapshot. Without it, a clean end of the stream by the daemon ends the
	// subscription.
	FollowRestarts bool
}

// Subscription is a live EventService.Subscribe stream that survives dropped
// connections. It delivers the events in order on [Subscription.Events]. It
// tracks the highest seq it delivered and the daemon instance of the last
// snapshot; when the connection drops it reconnects and resumes after that
// seq, so the daemon replays exactly the missed events (or, when it no
// longer holds them, sends a gap event and a fresh snapshot). No event is
// delivered twice.
//
// A consumer that stops reading long enough has its stream ended by the
// daemon (LIMIT_EXCEEDED with a resume point); the subscription then
// resumes from its cursor like after a dropped connection.
//
// The subscription ends when its context is done, on [Subscription.Close],
// when the daemon ends the stream (shutdown; unless
// [WatchOptions.FollowRestarts]), or on an error that retrying
// cannot fix; the events channel is then closed and [Subscription.Err] says
// why. While the daemon is unreachable it keeps trying (with backoff) until
// its context ends, so bound that context when a vanished daemon matters.
type Subscription struct {
	client *Client
	opts   WatchOptions
	ctx    context.Context
	cancel context.CancelFunc
	events chan *stepdv1.Event
	done   chan struct{}

	mu           sync.Mutex
	stream       stepdv1.EventService_SubscribeClient
	streamCancel context.CancelFunc
	seq          uint64
	instanceID   string
	reconnects   int
	duplicates   int
	closed       bool
	err          error

	sendMu sync.Mutex
}

// Subscribe opens a subscription. ctx bounds its whole life. Without a
// resume cursor, Subscribe returns once the daemon answered with its
// snapshot, which is the first event delivered; errors such as
// [ErrLimitExceeded] are returned here.
func (c *Client) Subscribe(ctx context.Context, opts WatchOptions) (*Subscription, error) {
	if opts.Buffer <= 0 {
		opts.Buffer = 256
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 2 * time.Second
	}
	if opts.ClientName == "" {
		opts.ClientName = c.clientName
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &Subscription{
		client:     c,
		opts:       opts,
		ctx:        sctx,
		cancel:     cancel,
		events:     make(chan *stepdv1.Event, opts.Buffer),
		done:       make(chan struct{}),
		seq:        opts.ResumeAfterSeq,
		instanceID: opts.ResumeInstanceID,
	}
	first, err := s.open(false)
	if err != nil {
		cancel()
		return nil, err
	}
	go s.run(first)
	return s, nil
}

// Events delivers the events, in order. It is closed when the subscription ends.
func (s *Subscription) Events() <-chan *stepdv1.Event { return s.events }

// Done is closed when the subscription has ended.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Err is why the subscription ended: nil after Close or a clean end of the
// stream by the daemon, the context's error, or the error that ended it.
// It is nil while the subscription runs.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Cursor is the highest seq handed to the Events channel (or the seq of the
// last snapshot handed to it) and the daemon instance it belongs to. Passing them
// as WatchOptions.ResumeAfterSeq / ResumeInstanceID resumes from there.
func (s *Subscription) Cursor() (seq uint64, instanceID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq, s.instanceID
}

// Reconnects counts the times the subscription re-established its stream.
func (s *Subscription) Reconnects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reconnects
}

// DuplicatesDropped counts events received again with a seq already
// delivered, and dropped. The daemon's contract is that it never happens.
func (s *Subscription) DuplicatesDropped() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.duplicates
}

// Close ends the subscription and waits for it to finish.
func (s *Subscription) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	<-s.done
	return nil
}

// SendDebugInput answers a pause on this stream (same semantics as
// [Client.SendDebugInput]). Success shows up as a pause_resolved event; a
// failure as an `error` event (see [StreamErrorToError]). It fails with
// codes.Unavailable while the subscription is reconnecting.
func (s *Subscription) SendDebugInput(key string, cmd *stepdv1.DebugCommand) error {
	return s.send(&stepdv1.SubscribeRequest{Message: &stepdv1.SubscribeRequest_DebugInput{
		DebugInput: &stepdv1.DebugInput{Key: key, Command: cmd, ClientName: s.opts.ClientName},
	}})
}

// SendHeartbeat sends a keepalive to the daemon (it answers nothing).
func (s *Subscription) SendHeartbeat() error {
	return s.send(&stepdv1.SubscribeRequest{Message: &stepdv1.SubscribeRequest_Heartbeat{Heartbeat: &stepdv1.Heartbeat{}}})
}

func (s *Subscription) send(req *stepdv1.SubscribeRequest) error {
	s.mu.Lock()
	stream := s.stream
	s.mu.Unlock()
	if stream == nil {
		select {
		case <-s.done:
			return &Error{Code: codes.Canceled, Message: "subscription ended"}
		default:
			return &Error{Code: codes.Unavailable, Message: "subscription is reconnecting"}
		}
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if err := stream.Send(req); err != nil {
		return &Error{Code: codes.Unavailable, Message: "subscription stream broke: " + err.Error()}
	}
	return nil
}

// open starts a stream and sends the Watch. Without a cursor it waits for the
// snapshot and returns it.
func (s *Subscription) open(reconnecting bool) (*stepdv1.Event, error) {
	s.mu.Lock()
	seq, instance := s.seq, s.instanceID
	s.mu.Unlock()

	ctx, cancel := context.WithCancel(s.ctx)
	var callOpts []grpc.CallOption
	if reconnecting {
		callOpts = append(callOpts, grpc.WaitForReady(true))
	}
	stream, err := s.client.events.Subscribe(ctx, callOpts...)
	if err != nil {
		cancel()
		return nil, wrap(err)
	}
	watch := &stepdv1.Watch{
		SessionIds:       s.opts.SessionIDs,
		Channels:         s.opts.Channels,
		ClientName:       s.opts.ClientName,
		ResumeAfterSeq:   seq,
		ResumeInstanceId: instance,
	}
	if err := stream.Send(&stepdv1.SubscribeRequest{Message: &stepdv1.SubscribeRequest_Watch{Watch: watch}}); err != nil {
		// The real error is the stream's status.
		_, rerr := stream.Recv()
		cancel()
		if rerr == nil || rerr == io.EOF {
			rerr = err
		}
		return nil, wrap(rerr)
	}
	var first *stepdv1.Event
	if seq == 0 {
		resp, err := stream.Recv()
		if err != nil {
			cancel()
			if err == io.EOF {
				return nil, &Error{Code: codes.Unavailable, Message: "stream ended before the snapshot"}
			}
			return nil, wrap(err)
		}
		first = resp.GetEvent()
	} else if _, err := stream.Header(); err != nil {
		cancel()
		return nil, wrap(err)
	}
	s.mu.Lock()
	s.stream, s.streamCancel = stream, cancel
	s.mu.Unlock()
	return first, nil
}

func (s *Subscription) dropStream() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streamCancel != nil {
		s.streamCancel()
	}
	s.stream, s.streamCancel = nil, nil
}

func (s *Subscription) finish(err error) {
	s.dropStream()
	s.mu.Lock()
	if s.closed {
		err = nil
	} else if err == nil && s.ctx.Err() != nil {
		err = s.ctx.Err()
	}
	s.err = err
	s.mu.Unlock()
	s.cancel()
	close(s.events)
	close(s.done)
}

func (s *Subscription) run(first *stepdv1.Event) {
	if first != nil && !s.deliver(first) {
		s.finish(nil)
		return
	}
	for {
		s.mu.Lock()
		stream := s.stream
		s.mu.Unlock()
		if stream == nil {
			// reconnect gave up because the subscription ended meanwhile.
			s.finish(nil)
			return
		}
		resp, err := stream.Recv()
		if err == nil {
			if !s.deliver(resp.GetEvent()) {
				s.finish(nil)
				return
			}
			continue
		}
		s.dropStream()
		if s.ctx.Err() != nil {
			s.finish(nil)
			return
		}
		if errors.Is(err, io.EOF) && !s.opts.FollowRestarts {
			// The daemon ended the stream with OK: it is shutting down.
			s.finish(nil)
			return
		}
		if e := wrap(err); !errors.Is(err, io.EOF) && !retryable(e, false) {
			s.finish(e)
			return
		}
		if err := s.reconnect(); err != nil {
			s.finish(err)
			return
		}
	}
}

// reconnect re-opens the stream, resuming after the cursor, retrying with
// backoff until it works, the subscription ends, or an error retrying cannot fix.
func (s *Subscription) reconnect() error {
	delay := 50 * time.Millisecond
	for {
		s.mu.Lock()
		fromZero := s.seq == 0
		s.mu.Unlock()
		first, err := s.open(true)
		if err == nil {
			s.mu.Lock()
			s.reconnects++
			s.mu.Unlock()
			if first != nil {
				// Without a cursor the daemon can only answer with a snapshot;
				// say that events up to it were folded into it.
				if snap := first.GetSnapshot(); fromZero && snap != nil && snap.GetSeq() > 0 {
					gap := &stepdv1.Event{Payload: &stepdv1.Event_Gap{Gap: &stepdv1.Gap{
						FromSeq: 1, ToSeq: snap.GetSeq(),
						Reason: "reconnected without a cursor; a fresh snapshot follows",
					}}}
					if !s.deliver(gap) {
						return nil
					}
				}
				if !s.deliver(first) {
					return nil
				}
			}
			return nil
		}
		if s.ctx.Err() != nil {
			return nil
		}
		if !retryable(err, true) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		delay = min(delay*2, s.opts.MaxBackoff)
	}
}

// retryable: the connection broke (rather than the daemon refusing).
func retryable(err error, reconnecting bool) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	switch {
	case e.Code == codes.Unavailable:
		return true
	case e.Reason == stepdv1.ErrorReason_ERROR_REASON_LIMIT_EXCEEDED:
		// A stream ended for what it left unread says where to resume
		// (our cursor, as we read up to the end). Otherwise our previous
		// stream may still hold its slot until the daemon notices it is gone.
		return reconnecting || e.Metadata["resume_after_seq"] != ""
	case e.Reason != stepdv1.ErrorReason_ERROR_REASON_UNSPECIFIED:
		return false
	case e.Code == codes.Internal, e.Code == codes.Unknown, e.Code == codes.Canceled:
		// Transport failures carry no stepd reason: a reset stream, such as
		// the RST_STREAM CANCEL of a proxy that lost the daemon (the
		// caller's own cancel is told apart by the subscription's context).
		return true
	}
	return false
}

// deliver hands one event to the Events channel and advances the cursor;
// false when the subscription ended meanwhile (the cursor is then left as it
// was).
func (s *Subscription) deliver(ev *stepdv1.Event) bool {
	if ev == nil {
		return true
	}
	s.mu.Lock()
	if seq := ev.GetSeq(); seq != 0 && seq <= s.seq {
		s.duplicates++
		s.mu.Unlock()
		return true
	}
	prevSeq, prevInstance := s.seq, s.instanceID
	if snap := ev.GetSnapshot(); snap != nil {
		s.seq, s.instanceID = snap.GetSeq(), snap.GetInstanceId()
	} else if ev.GetSeq() != 0 {
		s.seq = ev.GetSeq()
	}
	s.mu.Unlock()
	select {
	case s.events <- ev:
		return true
	case <-s.ctx.Done():
		s.mu.Lock()
		s.seq, s.instanceID = prevSeq, prevInstance
		s.mu.Unlock()
		return false
	}
}
