//! How long a write may take: its caller's deadline (a gRPC call's
//! `grpc-timeout`), or a default bound when it has none, and whether its
//! caller still waits for it. A write is either claimed by the writer as it
//! sends the commit, or abandoned by its caller (who left, or whose cutoff
//! came first), never both: an abandoned write is never committed, and a
//! claimed one is answered once its commit is (`writer.rs`, decision 136).

use std::sync::{
    Arc,
    atomic::{AtomicU8, Ordering},
};
use std::time::Duration;

use tokio::time::Instant;
/// The longest a write may take: the bound of a write whose caller set no
/// deadline (internal writes, a client without a timeout), and the cap of
/// one whose caller set a longer one.
pub const LONGEST: Duration = Duration::from_secs(30);

/// The share of a write's time kept back for its commit to finish and its
/// answer to reach the caller, at most `MARGIN_MAX`: the commit must begin
/// before the rest is spent.
const MARGIN_SHARE: u32 = 5;
const MARGIN_MAX: Duration = Duration::from_secs(1);

/// The write waits: neither claimed nor abandoned.
const WAITING: u8 = 0;
/// The writer is committing it.
const CLAIMED: u8 = 1;
/// Its caller left, or its cutoff came, before it was claimed.
const ABANDONED: u8 = 2;

/// A write's deadline and its caller's presence.
#[derive(Clone, Debug)]
pub struct Within {
    /// When the caller stops waiting.
    deadline: Instant,
    /// When its commit must have begun: the deadline less the margin.
    cutoff: Instant,
    /// `WAITING`, `CLAIMED` or `ABANDONED`, shared by the caller and the
    /// writer.
    state: Arc<AtomicU8>,
}

/// Abandons its write when dropped, unless the writer claimed it first.
#[must_use = "the write is abandoned when this is dropped"]
pub struct Waiting(Within);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.abandon();
    }
}

impl Within {
    /// A write whose caller waits `timeout` (`None`: as long as
    /// `LONGEST`), capped at `LONGEST`.
    pub fn of(timeout: Option<Duration>) -> Self {
        let span = timeout.map_or(LONGEST, |t| t.min(LONGEST));
        let margin = (span / MARGIN_SHARE).min(MARGIN_MAX);
        let now = Instant::now();
        Self {
            deadline: now + span,
            cutoff: now + (span - margin),
            state: Arc::new(AtomicU8::new(WAITING)),
        }
    }

    /// A write of the daemon's own (hits, history, the directory).
    pub fn internal() -> Self {
        Self::of(None)
    }

    /// Abandons the write when the guard is dropped: a request's handler
    /// holds it, so a request that is cancelled or whose deadline passes
    /// (its handler is dropped) takes its write out of the queue, unless
    /// its commit was already sent.
    pub fn waiting(&self) -> Waiting {
        Waiting(self.clone())
    }

    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    pub fn cutoff(&self) -> Instant {
        self.cutoff
    }

    /// Gives the write up unless the writer claimed it: true when it is
    /// abandoned (now or before), and then it is never committed.
    pub fn abandon(&self) -> bool {
        match self
            .state
            .compare_exchange(WAITING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(state) => state == ABANDONED,
        }
    }

    pub fn abandoned(&self) -> bool {
        self.state.load(Ordering::Acquire) == ABANDONED
    }

    /// Claims the write for a commit about to be sent; false when its
    /// caller abandoned it first.
    pub fn claim(&self) -> bool {
        let claimed =
            self.state
                .compare_exchange(WAITING, CLAIMED, Ordering::AcqRel, Ordering::Acquire);
        matches!(claimed, Ok(_) | Err(CLAIMED))
    }

    /// Hands a claimed write back after a commit that was refused (and so
    /// kept nothing): it may be tried again, or abandoned.
    pub fn release(&self) {
        let _ = self
            .state
            .compare_exchange(CLAIMED, WAITING, Ordering::AcqRel, Ordering::Acquire);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_margin_is_a_fifth_of_the_time_at_most_a_second() {
        let short = Within::of(Some(Duration::from_millis(500)));
        assert_eq!(short.deadline - short.cutoff, Duration::from_millis(100));
        let long = Within::of(Some(Duration::from_secs(20)));
        assert_eq!(long.deadline - long.cutoff, MARGIN_MAX);
        let capped = Within::of(Some(Duration::from_secs(3600)));
        let default = Within::internal();
        assert!(capped.deadline - Instant::now() <= LONGEST);
        assert!(default.deadline - default.cutoff == MARGIN_MAX);
    }

    #[test]
    fn a_write_is_claimed_or_abandoned_never_both() {
        let within = Within::of(Some(Duration::from_secs(5)));
        let guard = within.waiting();
        assert!(!within.abandoned());
        drop(guard);
        assert!(within.abandoned());
        assert!(!within.claim(), "an abandoned write is never claimed");

        let within = Within::of(Some(Duration::from_secs(5)));
        let guard = within.waiting();
        assert!(within.claim());
        drop(guard);
        assert!(!within.abandoned(), "a claimed write stays claimed");
        assert!(!within.abandon());
        // A refused commit hands it back; then its caller may give it up.
        within.release();
        assert!(within.abandon());
        assert!(!within.claim());
    }
}
