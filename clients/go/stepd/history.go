package stepd

import (
	"context"
	"iter"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
)

// ---- HistoryService ----

// HistoryOption sets a field of a GetSessionHistory request.
type HistoryOption func(*stepdv1.GetSessionHistoryRequest)

// HistoryChannels keeps only the events of these channels (none = every channel).
func HistoryChannels(channels ...stepdv1.EventChannel) HistoryOption {
	return func(r *stepdv1.GetSessionHistoryRequest) { r.Channels = append(r.Channels, channels...) }
}

// HistoryPageSize asks for at most n events per page (0 = the daemon's
// default, 100; it caps n at 1000).
func HistoryPageSize(n uint32) HistoryOption {
	return func(r *stepdv1.GetSessionHistoryRequest) { r.PageSize = n }
}

// SessionHistory yields a session's recorded events, oldest first, from the
// daemon's store: live or ended, kept until retention drops the oldest. It
// asks HistoryService.GetSessionHistory for one page after another,
// following next_page_token, while the loop goes on. A failed page is
// yielded as a nil event with its error (an [*Error]; [ErrSessionNotFound]
// for an unknown session) and ends the sequence.
//
//	for event, err := range c.SessionHistory(ctx, id) {
//		if err != nil { return err }
//		fmt.Println(event.GetSeq())
//	}
func (c *Client) SessionHistory(ctx context.Context, sessionID string, opts ...HistoryOption) iter.Seq2[*stepdv1.Event, error] {
	return func(yield func(*stepdv1.Event, error) bool) {
		req := &stepdv1.GetSessionHistoryRequest{SessionId: sessionID}
		for _, opt := range opts {
			opt(req)
		}
		for {
			resp, err := c.history.GetSessionHistory(ctx, req)
			if err != nil {
				yield(nil, wrap(err))
				return
			}
			for _, event := range resp.GetEvents() {
				if !yield(event, nil) {
					return
				}
			}
			if resp.GetNextPageToken() == "" {
				return
			}
			req.PageToken = resp.GetNextPageToken()
		}
	}
}

// History yields the session's recorded events, oldest first, also after it
// ended (as [Client.SessionHistory]).
func (s *Session) History(ctx context.Context, opts ...HistoryOption) iter.Seq2[*stepdv1.Event, error] {
	return s.client.SessionHistory(ctx, s.id, opts...)
}

// EndedOption sets a field of a ListEndedSessions request.
type EndedOption func(*stepdv1.ListEndedSessionsRequest)

// EndedLabels keeps only the sessions whose labels match selector
// (a breakpoint's label_selector syntax: "team=a,env!=prod").
func EndedLabels(selector string) EndedOption {
	return func(r *stepdv1.ListEndedSessionsRequest) { r.LabelSelector = selector }
}

// EndedSince keeps only the sessions that ended at or after t.
func EndedSince(t time.Time) EndedOption {
	return func(r *stepdv1.ListEndedSessionsRequest) { r.Since = timestamppb.New(t) }
}

// EndedUntil keeps only the sessions that started at or before t.
func EndedUntil(t time.Time) EndedOption {
	return func(r *stepdv1.ListEndedSessionsRequest) { r.Until = timestamppb.New(t) }
}

// EndedPageSize asks for at most n sessions per page (0 = the daemon's
// default, 100; it caps n at 1000).
func EndedPageSize(n uint32) EndedOption {
	return func(r *stepdv1.ListEndedSessionsRequest) { r.PageSize = n }
}

// EndedSessions yields the sessions that ended, on this daemon or any
// replica sharing its store, newest first, each as last recorded (with
// EndedAt, EndReason and ReplicaId). A session whose replica was killed
// before it could record the end reads END_REASON_REPLICA_LOST with
// EndedAt unset. It asks HistoryService.ListEndedSessions for one page
// after another, following next_page_token, while the loop goes on. A
// failed page is yielded as a nil session with its error (an [*Error])
// and ends the sequence.
//
//	for s, err := range c.EndedSessions(ctx, stepd.EndedLabels("team=a")) {
//		if err != nil { return err }
//		fmt.Println(s.GetId(), s.GetEndReason())
//	}
func (c *Client) EndedSessions(ctx context.Context, opts ...EndedOption) iter.Seq2[*stepdv1.Session, error] {
	return func(yield func(*stepdv1.Session, error) bool) {
		req := &stepdv1.ListEndedSessionsRequest{}
		for _, opt := range opts {
			opt(req)
		}
		for {
			resp, err := c.history.ListEndedSessions(ctx, req)
			if err != nil {
				yield(nil, wrap(err))
				return
			}
			for _, session := range resp.GetSessions() {
				if !yield(session, nil) {
					return
				}
			}
			if resp.GetNextPageToken() == "" {
				return
			}
			req.PageToken = resp.GetNextPageToken()
		}
	}
}
