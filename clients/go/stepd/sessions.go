package stepd

import (
	"context"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
)

// ---- SessionService ----

// Launch starts a program under a debug adapter; it answers once the
// configuration is done.
func (c *Client) Launch(ctx context.Context, req *stepdv1.LaunchRequest) (*stepdv1.LaunchResponse, error) {
	resp, err := c.sessions.Launch(ctx, req)
	return resp, wrap(err)
}

// Attach attaches a debug adapter to a running process or debug server.
func (c *Client) Attach(ctx context.Context, req *stepdv1.AttachRequest) (*stepdv1.AttachResponse, error) {
	resp, err := c.sessions.Attach(ctx, req)
	return resp, wrap(err)
}

// Disconnect ends a session, terminating or detaching the debuggee, and
// returns the session as it ended.
func (c *Client) Disconnect(ctx context.Context, sessionID string, mode stepdv1.DisconnectMode) (*stepdv1.Session, error) {
	resp, err := c.sessions.Disconnect(ctx, &stepdv1.DisconnectRequest{SessionId: sessionID, Mode: mode})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetSession(), nil
}

// ListSessions lists sessions, oldest first. req may be nil (live sessions).
func (c *Client) ListSessions(ctx context.Context, req *stepdv1.ListSessionsRequest) ([]*stepdv1.Session, error) {
	if req == nil {
		req = &stepdv1.ListSessionsRequest{}
	}
	resp, err := c.sessions.ListSessions(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetSessions(), nil
}

// GetSession returns one session with its pending pauses and breakpoint placements.
func (c *Client) GetSession(ctx context.Context, sessionID string) (*stepdv1.GetSessionResponse, error) {
	resp, err := c.sessions.GetSession(ctx, &stepdv1.GetSessionRequest{SessionId: sessionID})
	return resp, wrap(err)
}

// Continue resumes execution and returns the session's state when answered
// (see the request's wait mode).
func (c *Client) Continue(ctx context.Context, req *stepdv1.ContinueRequest) (*stepdv1.StableState, error) {
	resp, err := c.sessions.Continue(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetState(), nil
}

// Step steps one thread over, into or out of the current line.
func (c *Client) Step(ctx context.Context, req *stepdv1.StepRequest) (*stepdv1.StableState, error) {
	resp, err := c.sessions.Step(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetState(), nil
}

// Pause interrupts a running program (DAP) or arms "hold at the next point" (probes).
func (c *Client) Pause(ctx context.Context, req *stepdv1.PauseRequest) (*stepdv1.StableState, error) {
	resp, err := c.sessions.Pause(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetState(), nil
}

// ListThreads returns a session's threads.
func (c *Client) ListThreads(ctx context.Context, sessionID string) ([]*stepdv1.Thread, error) {
	resp, err := c.sessions.ListThreads(ctx, &stepdv1.ListThreadsRequest{SessionId: sessionID})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetThreads(), nil
}

// GetStackTrace returns frames of a stopped thread, paged.
func (c *Client) GetStackTrace(ctx context.Context, req *stepdv1.GetStackTraceRequest) (*stepdv1.GetStackTraceResponse, error) {
	resp, err := c.sessions.GetStackTrace(ctx, req)
	return resp, wrap(err)
}

// ListScopes returns the scopes of a frame.
func (c *Client) ListScopes(ctx context.Context, sessionID, frameID string) ([]*stepdv1.Scope, error) {
	resp, err := c.sessions.ListScopes(ctx, &stepdv1.ListScopesRequest{SessionId: sessionID, FrameId: frameID})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetScopes(), nil
}

// ListVariables returns children of a variable container, paged.
func (c *Client) ListVariables(ctx context.Context, req *stepdv1.ListVariablesRequest) (*stepdv1.ListVariablesResponse, error) {
	resp, err := c.sessions.ListVariables(ctx, req)
	return resp, wrap(err)
}

// SetVariable assigns a variable and returns it after the assignment.
func (c *Client) SetVariable(ctx context.Context, req *stepdv1.SetVariableRequest) (*stepdv1.Variable, error) {
	resp, err := c.sessions.SetVariable(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetVariable(), nil
}

// Evaluate evaluates an expression, optionally in a frame.
func (c *Client) Evaluate(ctx context.Context, req *stepdv1.EvaluateRequest) (*stepdv1.Variable, error) {
	resp, err := c.sessions.Evaluate(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetResult(), nil
}

// ReadOutput reads a session's captured output from an offset, without draining it.
func (c *Client) ReadOutput(ctx context.Context, req *stepdv1.ReadOutputRequest) (*stepdv1.ReadOutputResponse, error) {
	resp, err := c.sessions.ReadOutput(ctx, req)
	return resp, wrap(err)
}

// SendDebugInput answers the pause with this key. The first answer wins; a
// second one fails with [ErrAlreadyAnswered], an unknown key with
// [ErrPauseNotFound].
func (c *Client) SendDebugInput(ctx context.Context, key string, cmd *stepdv1.DebugCommand) (*stepdv1.SendDebugInputResponse, error) {
	resp, err := c.sessions.SendDebugInput(ctx, &stepdv1.SendDebugInputRequest{
		Input: &stepdv1.DebugInput{Key: key, Command: cmd, ClientName: c.clientName},
	})
	return resp, wrap(err)
}

// ListPauses lists pending pauses, oldest first; sessionID "" means every session.
func (c *Client) ListPauses(ctx context.Context, sessionID string) ([]*stepdv1.Pause, error) {
	resp, err := c.sessions.ListPauses(ctx, &stepdv1.ListPausesRequest{SessionId: sessionID})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetPauses(), nil
}
