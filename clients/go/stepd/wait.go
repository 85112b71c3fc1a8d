package stepd

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
)

// WaitForPause returns the first pending pause of the session sessionID
// ("" = of any session): one already pending when it is called, else the
// next one to come. It waits until ctx is done (then it returns ctx's
// error, so bound ctx with a deadline), and fails with an [*Error] of reason
// SESSION_ENDED ([ErrSessionEnded]; Metadata "session_id", "end_reason" and,
// when known, "exit_code") when the session ends, or has ended, before it
// pauses.
func (c *Client) WaitForPause(ctx context.Context, sessionID string) (*stepdv1.Pause, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := WatchOptions{Channels: []stepdv1.EventChannel{
		stepdv1.EventChannel_EVENT_CHANNEL_EXECUTION,
		stepdv1.EventChannel_EVENT_CHANNEL_LIFECYCLE,
	}}
	if sessionID != "" {
		opts.SessionIDs = []string{sessionID}
	}
	sub, err := c.Subscribe(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	// A snapshot may come in parts; the state is all of them together.
	var parts []*stepdv1.Snapshot
	for {
		var ev *stepdv1.Event
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-sub.Events():
			if !ok {
				if err := sub.Err(); err != nil {
					return nil, err
				}
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, &Error{Code: codes.Unavailable, Message: "the event stream ended before a pause"}
			}
			ev = e
		}
		if snap := ev.GetSnapshot(); snap != nil {
			if snap.GetPart() == 0 {
				parts = parts[:0]
			}
			parts = append(parts, snap)
			if snap.GetMore() {
				continue
			}
			pause, err := c.pauseInSnapshot(ctx, parts, sessionID)
			if pause != nil || err != nil {
				return pause, err
			}
			continue
		}
		if p := ev.GetStopped().GetPause(); p != nil && (sessionID == "" || p.GetSessionId() == sessionID) {
			return p, nil
		}
		if end := ev.GetSessionEnded(); end != nil && sessionID != "" && ev.GetSessionId() == sessionID {
			return nil, sessionEnded(sessionID, end.GetReason(), end.ExitCode)
		}
	}
}

// pauseInSnapshot: a pending pause of the session in the (whole) snapshot,
// or the error that no pause can come (the session ended or is unknown).
func (c *Client) pauseInSnapshot(ctx context.Context, parts []*stepdv1.Snapshot, sessionID string) (*stepdv1.Pause, error) {
	for _, part := range parts {
		for _, p := range part.GetPauses() {
			if sessionID == "" || p.GetSessionId() == sessionID {
				return p, nil
			}
		}
	}
	if sessionID == "" {
		return nil, nil
	}
	for _, part := range parts {
		for _, s := range part.GetSessions() {
			if s.GetId() != sessionID {
				continue
			}
			if s.GetState() == stepdv1.SessionState_SESSION_STATE_ENDED {
				return nil, sessionEnded(sessionID, s.GetEndReason(), s.ExitCode)
			}
			return nil, nil
		}
	}
	// Not in the snapshot: the daemon says whether it exists (SESSION_NOT_FOUND).
	resp, err := c.GetSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if s := resp.GetSession(); s.GetState() == stepdv1.SessionState_SESSION_STATE_ENDED {
		return nil, sessionEnded(sessionID, s.GetEndReason(), s.ExitCode)
	}
	return nil, nil
}

func sessionEnded(sessionID string, reason stepdv1.EndReason, exitCode *int32) *Error {
	meta := map[string]string{"session_id": sessionID, "end_reason": reason.String()}
	msg := fmt.Sprintf("session %s ended (%s) before it paused", sessionID, reason)
	if exitCode != nil {
		meta["exit_code"] = fmt.Sprint(*exitCode)
		msg = fmt.Sprintf("session %s ended (%s, exit code %d) before it paused", sessionID, reason, *exitCode)
	}
	return &Error{
		Reason:     stepdv1.ErrorReason_ERROR_REASON_SESSION_ENDED,
		ReasonName: ReasonName(stepdv1.ErrorReason_ERROR_REASON_SESSION_ENDED),
		Code:       codes.FailedPrecondition,
		Message:    msg,
		Metadata:   meta,
	}
}
