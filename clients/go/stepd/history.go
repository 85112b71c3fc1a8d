package stepd

import (
	"context"
	"iter"

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
