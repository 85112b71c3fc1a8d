package stepd_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

// A subscription with FollowRestarts, through a real HAProxy in front of a
// daemon that is restarted in place: the proxy resets the stream when it
// loses the daemon (killed) or passes on its clean end (stopped), and the
// subscription goes on with the daemon that comes back.
func TestFollowRestartsThroughHaproxy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		signal syscall.Signal
	}{{"killed", syscall.SIGKILL}, {"stopped", syscall.SIGTERM}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			addr, dir := freeAddr(t), t.TempDir()
			cfg := daemonConfig{listen: addr, dataDir: dir}
			first := startDaemon(t, cfg)
			proxy := startHaproxy(t, addr)
			c := first.dialAt(t, proxy.addr)
			sub, err := c.Subscribe(ctx, stepd.WatchOptions{
				Channels:       []stepdv1.EventChannel{stepdv1.EventChannel_EVENT_CHANNEL_BREAKPOINTS},
				FollowRestarts: true,
				MaxBackoff:     200 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			old := (<-sub.Events()).GetSnapshot().GetInstanceId()

			if err := first.cmd.Process.Signal(tc.signal); err != nil {
				t.Fatal(err)
			}
			<-first.exited
			second := startDaemon(t, cfg)
			direct := second.dial(t)
			ping, err := direct.Ping(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ping.GetInstanceId() == old {
				t.Fatalf("the restarted daemon kept instance %s", old)
			}
			snap := waitFor(ctx, t, sub, func(ev *stepdv1.Event) bool {
				return ev.GetSnapshot() != nil && ev.GetSnapshot().GetInstanceId() != old
			})
			if got := snap.GetSnapshot().GetInstanceId(); got != ping.GetInstanceId() {
				t.Fatalf("snapshot of %s, want the restarted daemon %s", got, ping.GetInstanceId())
			}
			if sub.Reconnects() < 1 {
				t.Fatalf("reconnects = %d", sub.Reconnects())
			}
			bp, err := direct.AddBreakpoint(ctx, stepd.SourceBreakpoint("/behind_proxy.go", 1))
			if err != nil {
				t.Fatal(err)
			}
			waitFor(ctx, t, sub, func(ev *stepdv1.Event) bool {
				return ev.GetBreakpointUpdated().GetBreakpoint().GetId() == bp.GetId()
			})
			// Closed by its caller, it ends without an error.
			if err := sub.Close(); err != nil || sub.Err() != nil {
				t.Fatalf("close: %v, err: %v", err, sub.Err())
			}
		})
	}
}

// waitFor reads events until one matches; fails the test if the
// subscription ends or the context does first.
func waitFor(ctx context.Context, t *testing.T, sub *stepd.Subscription, match func(*stepdv1.Event) bool) *stepdv1.Event {
	t.Helper()
	for {
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				t.Fatalf("the subscription ended: %v", sub.Err())
			}
			if match(ev) {
				return ev
			}
		case <-ctx.Done():
			t.Fatalf("no matching event in time: %v", ctx.Err())
		}
	}
}
