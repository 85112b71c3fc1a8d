//! A Pause request, and when stepd does not interrupt the adapter for it at
//! once: while stepd is itself continuing breakpoint hits that do not stop
//! (a hit condition not met, a LOG point it carries out), the next of those
//! hits becomes the pause; and under an adapter whose interrupt can cross a
//! breakpoint stop and lose both (lldb, docs/adapters/lldb.md), a Pause
//! waits briefly for the next stop whenever breakpoints are placed. Taking
//! a stop that comes anyway cannot race it, and it is sooner.

use serde_json::json;
use tokio::time::{Duration, Instant};

use super::Actor;
use crate::{messages, session::dap_error};
use stepd_core::error::ApiResult;

/// Hits continued this recently make a loop "hot": its next hit is expected
/// well within this time. A Pause waits this long for a stop before
/// interrupting the adapter after all.
const HOT: Duration = Duration::from_millis(200);

/// Breakpoint hits stepd continued itself, and a Pause waiting for the next.
#[derive(Default)]
pub(super) struct HotHits {
    /// When stepd last continued a hit that did not stop, and on which thread.
    last: Option<(Instant, i64)>,
    /// A Pause is waiting for the next hit until then, for this thread (0: any).
    waiting: Option<(Instant, i64)>,
}

impl HotHits {
    /// stepd continued a hit on `thread` without showing it.
    pub(super) fn continued(&mut self, thread: i64) {
        self.last = Some((Instant::now(), thread));
    }

    /// When the waiting Pause gives up on the next hit.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.waiting.map(|(at, _)| at)
    }

    /// A stop was shown: whatever Pause was waiting is answered by it.
    pub(super) fn stopped(&mut self) {
        self.waiting = None;
        self.last = None;
    }

    /// Whether a Pause for `thread` waits for the next stop (`armed`: an
    /// adapter whose interrupt may cross one, with breakpoints placed); if
    /// so, it now does.
    fn wait_for_next(&mut self, thread: i64, armed: bool) -> bool {
        let now = Instant::now();
        let hot = self
            .last
            .is_some_and(|(at, on)| now.duration_since(at) < HOT && (thread == 0 || thread == on));
        let waits = hot || armed;
        if waits {
            self.waiting = Some((now + HOT, thread));
        }
        waits
    }
}

impl Actor {
    /// A Pause request while the program runs: the stop that follows,
    /// whatever made it, is shown as the pause (`on_stopped`).
    pub(super) async fn request_pause(&mut self, thread: i64) -> ApiResult<()> {
        let before = self.exec.pause_asked();
        let armed = self.adapter.kind.interrupt_may_cross_a_stop() && !self.placed.is_empty();
        if self.hot.wait_for_next(thread, armed) {
            tracing::debug!(session = %self.shared.id, "a Pause waits for the next stop");
            return Ok(());
        }
        tracing::debug!(session = %self.shared.id, kind = %self.adapter.kind, placed = self.placed.len(), "a Pause interrupts the adapter");
        let sent = self.interrupt(thread).await;
        if sent.is_err() {
            // Refused: the session is as it was.
            self.exec.pause_refused(before);
        }
        sent
    }

    /// The hot loop went quiet before its next hit: interrupt after all.
    pub(super) async fn pause_waited_too_long(&mut self) {
        let Some((_, thread)) = self.hot.waiting.take() else {
            return;
        };
        if self.exec.pause_out()
            && self.book.is_empty()
            && let Err(err) = self.interrupt(thread).await
        {
            tracing::warn!(session = %self.shared.id, %err, "could not send a pause");
        }
    }

    /// Sends `pause` to the adapter without waiting for its answer: lldb may
    /// hold that back until stepd has taken the stop that raced the request,
    /// and the stop is what the caller waits for.
    async fn interrupt(&mut self, thread: i64) -> ApiResult<()> {
        let target = if thread != 0 {
            thread
        } else {
            let threads: messages::ThreadsResponse = self
                .client
                .call("threads", json!({}))
                .await
                .map_err(|e| dap_error(&e))?;
            threads.threads.first().map_or(0, |t| t.id)
        };
        let answer = self.client.send("pause", json!({"threadId": target}));
        let (session, patience) = (self.shared.id.clone(), self.client.timeout());
        tokio::spawn(async move {
            match tokio::time::timeout(patience, answer).await {
                Ok(Ok(response)) => {
                    if let Err(err) = crate::client::body_of(response) {
                        tracing::warn!(%session, %err, "the adapter refused a pause");
                    }
                }
                Ok(Err(_)) => {}
                Err(_) => tracing::warn!(%session, "the adapter did not answer a pause"),
            }
        });
        Ok(())
    }
}
