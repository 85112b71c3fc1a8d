//! Pause requests waiting for the probe's next hold. Each is answered once:
//! with the hold, when its timeout passes, or when the session ends. The
//! session says what happened; this answers whoever it concerns.

use std::time::Duration;

use stepd_proto::v1::{EndReason, Pause, SessionState, StableState};
use tokio::{sync::oneshot, time::Instant};

use stepd_core::error::ApiResult;

/// A Pause request waiting for the next hold.
struct Waiter {
    reply: oneshot::Sender<ApiResult<StableState>>,
    deadline: Option<Instant>,
    started: std::time::Instant,
}

impl Waiter {
    fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }
}

#[derive(Default)]
pub(crate) struct Waiters {
    waiting: Vec<Waiter>,
}

impl Waiters {
    /// A Pause request waits, at most `timeout` from `now` (None: until the
    /// hold or the session's end).
    pub fn wait(
        &mut self,
        reply: oneshot::Sender<ApiResult<StableState>>,
        timeout: Option<Duration>,
        now: Instant,
    ) {
        self.waiting.push(Waiter {
            reply,
            deadline: timeout.map(|t| now + t),
            started: std::time::Instant::now(),
        });
    }

    /// Whether anyone waits (a hold copies its pause only then).
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// A point held as `pause`: every waiter gets it.
    pub fn held(&mut self, pause: &Pause) {
        for waiter in self.waiting.drain(..) {
            let elapsed_ms = waiter.elapsed_ms();
            let _ = waiter.reply.send(Ok(StableState {
                state: SessionState::Stopped.into(),
                waited: true,
                stop_reason: pause.reason,
                pause: Some(pause.clone()),
                hit_breakpoint_ids: pause.breakpoint_ids.clone(),
                elapsed_ms,
                ..Default::default()
            }));
        }
    }

    /// The waiters whose timeout has come by `now` are told the session's
    /// `state` and that they timed out.
    pub fn expire(&mut self, now: Instant, state: i32) {
        let (expired, waiting): (Vec<_>, Vec<_>) = self
            .waiting
            .drain(..)
            .partition(|w| w.deadline.is_some_and(|d| d <= now));
        self.waiting = waiting;
        for w in expired {
            let elapsed_ms = w.elapsed_ms();
            let _ = w.reply.send(Ok(StableState {
                state,
                waited: true,
                timed_out: true,
                elapsed_ms,
                ..Default::default()
            }));
        }
    }

    /// The session ended for `reason`: every waiter hears it.
    pub fn end(&mut self, reason: EndReason) {
        for w in self.waiting.drain(..) {
            let _ = w.reply.send(Ok(StableState {
                state: SessionState::Ended.into(),
                waited: true,
                end_reason: reason.into(),
                ..Default::default()
            }));
        }
    }

    /// When the next waiter's timeout comes.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.waiting.iter().filter_map(|w| w.deadline).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Reply = oneshot::Receiver<ApiResult<StableState>>;

    fn wait(waiters: &mut Waiters, timeout_s: Option<u64>, now: Instant) -> Reply {
        let (tx, rx) = oneshot::channel();
        waiters.wait(tx, timeout_s.map(Duration::from_secs), now);
        rx
    }

    fn answer(rx: &mut Reply) -> Option<StableState> {
        rx.try_recv().ok().map(|r| r.expect("a state"))
    }

    #[test]
    fn waiters_time_out_in_turn_and_a_hold_answers_the_rest() {
        let now = Instant::now();
        let mut waiters = Waiters::default();
        let mut soon = wait(&mut waiters, Some(1), now);
        let mut later = wait(&mut waiters, Some(5), now);
        let mut forever = wait(&mut waiters, None, now);
        assert_eq!(waiters.next_deadline(), Some(now + Duration::from_secs(1)));
        let running = SessionState::Running as i32;
        waiters.expire(now + Duration::from_secs(1), running);
        let timed_out = answer(&mut soon).expect("timed out");
        assert!(timed_out.timed_out && timed_out.waited);
        assert_eq!(timed_out.state, running);
        assert!(answer(&mut later).is_none());
        assert_eq!(waiters.next_deadline(), Some(now + Duration::from_secs(5)));
        let pause = Pause {
            key: "p1".into(),
            breakpoint_ids: vec!["b1".into()],
            ..Default::default()
        };
        waiters.held(&pause);
        assert!(waiters.is_empty());
        for rx in [&mut later, &mut forever] {
            let held = answer(rx).expect("held");
            assert_eq!(held.state(), SessionState::Stopped);
            assert!(!held.timed_out);
            assert_eq!(held.pause.map(|p| p.key).as_deref(), Some("p1"));
            assert_eq!(held.hit_breakpoint_ids, ["b1"]);
        }
        assert_eq!(waiters.next_deadline(), None);
    }

    #[test]
    fn the_session_ending_answers_every_waiter() {
        let now = Instant::now();
        let mut waiters = Waiters::default();
        let mut rx = wait(&mut waiters, None, now);
        waiters.end(EndReason::Quit);
        let ended = answer(&mut rx).expect("ended");
        assert_eq!(ended.state(), SessionState::Ended);
        assert_eq!(ended.end_reason(), EndReason::Quit);
        assert!(waiters.is_empty());
    }
}
