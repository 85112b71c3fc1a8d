package stepd

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
)

// Session is a handle on one debug session: the execution, inspection and
// answering calls of [Client] with the session id filled in. Get one from
// [Client.LaunchSession], [Client.AttachSession] or [Client.Session]. It is
// safe for concurrent use. Close ends the session, so
//
//	s, err := c.LaunchSession(ctx, &stepdv1.LaunchRequest{Program: "app.py"})
//	if err != nil { return err }
//	defer s.Close() // no debuggee is left behind
//
// leaves no debuggee running whatever happens in between.
type Session struct {
	client *Client
	id     string
	info   *stepdv1.Session

	endOnce sync.Once
	ended   *stepdv1.Session
	endErr  error
}

// LaunchSession starts a program under a debug adapter (as [Client.Launch])
// and returns a handle on its session.
func (c *Client) LaunchSession(ctx context.Context, req *stepdv1.LaunchRequest) (*Session, error) {
	resp, err := c.Launch(ctx, req)
	if err != nil {
		return nil, err
	}
	return &Session{client: c, id: resp.GetSession().GetId(), info: resp.GetSession()}, nil
}

// AttachSession attaches a debug adapter (as [Client.Attach]) and returns a
// handle on its session; Close then detaches.
func (c *Client) AttachSession(ctx context.Context, req *stepdv1.AttachRequest) (*Session, error) {
	resp, err := c.Attach(ctx, req)
	if err != nil {
		return nil, err
	}
	return &Session{client: c, id: resp.GetSession().GetId(), info: resp.GetSession()}, nil
}

// Session is a handle on an existing session, e.g. a probe's. Nothing is
// checked until the first call.
func (c *Client) Session(id string) *Session {
	return &Session{client: c, id: id}
}

// ID is the session's id.
func (s *Session) ID() string { return s.id }

// Info is the session as Launch or Attach returned it (nil for a handle from
// [Client.Session]); [Session.Get] asks the daemon for it as it is now.
func (s *Session) Info() *stepdv1.Session { return s.info }

// Get returns the session as it is now, with its pending pauses.
func (s *Session) Get(ctx context.Context) (*stepdv1.GetSessionResponse, error) {
	return s.client.GetSession(ctx, s.id)
}

// Continue resumes every thread and waits until the session is stable again
// (stopped, ended, or the daemon's 30 s wait passed: StableState.timed_out).
func (s *Session) Continue(ctx context.Context) (*stepdv1.StableState, error) {
	return s.client.Continue(ctx, &stepdv1.ContinueRequest{SessionId: s.id})
}

// Step steps the thread of the latest pause (over, in or out) and waits
// until the session is stable again.
func (s *Session) Step(ctx context.Context, kind stepdv1.StepKind) (*stepdv1.StableState, error) {
	return s.client.Step(ctx, &stepdv1.StepRequest{SessionId: s.id, Kind: kind})
}

// Pause interrupts the running program (DAP) or arms "hold at the next
// point" (probes), and waits until the session is stable again.
func (s *Session) Pause(ctx context.Context) (*stepdv1.StableState, error) {
	return s.client.Pause(ctx, &stepdv1.PauseRequest{SessionId: s.id})
}

// WaitForPause returns the session's pending pause, or waits for the next
// one; see [Client.WaitForPause].
func (s *Session) WaitForPause(ctx context.Context) (*stepdv1.Pause, error) {
	return s.client.WaitForPause(ctx, s.id)
}

// Answer answers the pause with this key (see [Client.SendDebugInput]).
func (s *Session) Answer(ctx context.Context, key string, cmd *stepdv1.DebugCommand) (*stepdv1.SendDebugInputResponse, error) {
	return s.client.SendDebugInput(ctx, key, cmd)
}

// Inject answers a probe pause by replacing the held value with value, any
// JSON-marshalable Go value (see [CmdInject]).
func (s *Session) Inject(ctx context.Context, key string, value any) (*stepdv1.SendDebugInputResponse, error) {
	cmd, err := CmdInject(value)
	if err != nil {
		return nil, err
	}
	return s.client.SendDebugInput(ctx, key, cmd)
}

// Locals are the variables of the local scope of the top frame of the latest
// stop (DAP sessions): the scope named "Locals" (any case), else the first.
func (s *Session) Locals(ctx context.Context) ([]*stepdv1.Variable, error) {
	stack, err := s.client.GetStackTrace(ctx, &stepdv1.GetStackTraceRequest{SessionId: s.id, Levels: 1})
	if err != nil {
		return nil, err
	}
	if len(stack.GetFrames()) == 0 {
		return nil, nil
	}
	scopes, err := s.client.ListScopes(ctx, s.id, stack.GetFrames()[0].GetId())
	if err != nil || len(scopes) == 0 {
		return nil, err
	}
	scope := scopes[0]
	for _, sc := range scopes {
		if strings.EqualFold(sc.GetName(), "locals") {
			scope = sc
			break
		}
	}
	vars, err := s.client.ListVariables(ctx, &stepdv1.ListVariablesRequest{SessionId: s.id, VariablesRef: scope.GetVariablesRef()})
	if err != nil {
		return nil, err
	}
	return vars.GetVariables(), nil
}

// Eval evaluates an expression in the top frame of the latest stop (or the
// global context while the program runs).
func (s *Session) Eval(ctx context.Context, expression string) (*stepdv1.Variable, error) {
	return s.client.Evaluate(ctx, &stepdv1.EvaluateRequest{SessionId: s.id, Expression: expression})
}

// Output is the session's captured output the daemon still holds, from the
// start, concatenated; categories ("stdout", "stderr", ...) select, none = all.
func (s *Session) Output(ctx context.Context, categories ...string) (string, error) {
	var b strings.Builder
	var offset uint64
	for {
		resp, err := s.client.ReadOutput(ctx, &stepdv1.ReadOutputRequest{SessionId: s.id, AfterOffset: offset, Categories: categories})
		if err != nil {
			return b.String(), err
		}
		for _, chunk := range resp.GetChunks() {
			b.WriteString(chunk.GetText())
		}
		if len(resp.GetChunks()) == 0 || resp.GetNextOffset() <= offset {
			return b.String(), nil
		}
		offset = resp.GetNextOffset()
	}
}

// End ends the session: terminates a debuggee stepd launched, detaches from
// one it attached to, stops the held points of a probe (docs/probes.md). It
// returns the session as it ended; a session that had already ended is not
// an error (nor, for a launched or attached one, a session the daemon has
// since forgotten: nil, nil). Later calls return the first call's result.
func (s *Session) End(ctx context.Context) (*stepdv1.Session, error) {
	s.endOnce.Do(func() {
		ended, err := s.client.Disconnect(ctx, s.id, stepdv1.DisconnectMode_DISCONNECT_MODE_UNSPECIFIED)
		if errors.Is(err, ErrSessionEnded) {
			resp, getErr := s.client.GetSession(ctx, s.id)
			ended, err = resp.GetSession(), getErr
		}
		if errors.Is(err, ErrSessionNotFound) && s.info != nil {
			ended, err = nil, nil
		}
		s.ended, s.endErr = ended, err
	})
	return s.ended, s.endErr
}

// Close is End bounded by 10 seconds, for defer.
func (s *Session) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.End(ctx)
	return err
}
