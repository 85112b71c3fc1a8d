//! The probe's stream as the session sees it: what it writes through the
//! outbox (`outbox.rs`), when the probe gets a heartbeat, when the session
//! stops reading a probe that leaves its answers unread, when clients are
//! told so, and when a probe that reads nothing is deemed gone. The actor
//! reads the Connect stream itself and asks this part whether to.

use std::time::Duration;

use stepd_proto::v1::{ErrorReason, HeartbeatEvent, Hello, connect_response::Message as Out};
use tokio::time::Instant;

use super::outbox::{self, Outbox, Permit};
use stepd_core::{
    error::{ApiError, ApiResult},
    time::now_us,
};

/// How long the daemon stops reading a probe before clients are told: a
/// burst the probe is still reading through is not news.
const UNREAD_NOTICE_AFTER: Duration = Duration::from_millis(500);
/// Bounds on the heartbeat interval a probe may ask for.
const HEARTBEAT_MIN: Duration = Duration::from_secs(1);
const HEARTBEAT_MAX: Duration = Duration::from_secs(3600);

/// The quiet time after which the probe gets a heartbeat: what its Hello
/// asks for, within bounds, else the daemon's `default`.
pub(crate) fn heartbeat_interval(hello: &Hello, default: Duration) -> Duration {
    hello
        .heartbeat_interval
        .and_then(|d| Duration::try_from(d).ok())
        .map_or(default, |d| d.clamp(HEARTBEAT_MIN, HEARTBEAT_MAX))
}

/// Since when the daemon has stopped reading the probe, and whether clients
/// were told. No I/O: it says when to tell them.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Unread {
    since: Option<(Instant, bool)>,
}

impl Unread {
    /// The daemon reads the probe (`stopped` false) or not, at `now`; true
    /// once, when clients are to be told it stopped.
    pub fn note(&mut self, stopped: bool, now: Instant) -> bool {
        let (next, tell) = match (stopped, self.since) {
            (false, _) => (None, false),
            (true, None) => (Some((now, false)), false),
            (true, Some((since, false))) if now >= since + UNREAD_NOTICE_AFTER => {
                (Some((since, true)), true)
            }
            (true, unread) => (unread, false),
        };
        self.since = next;
        tell
    }

    /// When clients are to be told, while they have not been.
    pub fn deadline(&self) -> Option<Instant> {
        match self.since {
            Some((since, false)) => Some(since + UNREAD_NOTICE_AFTER),
            _ => None,
        }
    }
}

/// When the next heartbeat is due at `now`: `interval` after the last
/// message, which went `quiet` ago.
fn heartbeat_due(now: Instant, interval: Duration, quiet: Duration) -> Instant {
    now + interval.saturating_sub(quiet)
}

/// The session's side of the probe's stream.
pub(crate) struct Transport {
    /// What goes to the probe: control messages are never dropped.
    out: Outbox,
    /// Quiet time after which the probe gets a heartbeat.
    heartbeat: Duration,
    /// Whether clients were told the daemon stopped reading the probe.
    unread: Unread,
}

impl Transport {
    pub fn new(out: outbox::Sender, heartbeat: Duration) -> Self {
        Self {
            out: Outbox::new(out),
            heartbeat,
            unread: Unread::default(),
        }
    }

    /// The heartbeat interval the probe was told.
    pub fn heartbeat(&self) -> Duration {
        self.heartbeat
    }

    /// Sends a control message to the probe without waiting; it is never
    /// dropped (`outbox.rs`).
    pub fn send(&mut self, message: Out) {
        self.out.send(message);
    }

    /// Sends through room reserved earlier.
    pub fn send_reserved(&mut self, permit: Permit, message: Out) {
        self.out.send_reserved(permit, message);
    }

    /// Sends `message` through `permit` when there is one, else as any
    /// control message.
    pub fn send_through(&mut self, permit: Option<Permit>, message: Out) {
        match permit {
            Some(permit) => self.out.send_reserved(permit, message),
            None => self.out.send(message),
        }
    }

    /// Room for a message the probe must get before anything changes (the
    /// Resume of a client's answer, an evaluation), or `PROBE_NOT_READING`.
    pub fn reserve(&mut self) -> ApiResult<Permit> {
        self.out.reserve_now().ok_or_else(|| {
            ApiError::new(
                ErrorReason::ProbeNotReading,
                format!(
                    "the probe has not read what was sent to it for {} ms, so the answer \
                     could not reach it; nothing changed and the pause stays pending: \
                     answer again once it reads",
                    self.out.stalled_for().as_millis()
                ),
            )
        })
    }

    /// Whether the session reads what the probe sends: a probe that leaves
    /// its answers unread is not read either.
    pub fn reading(&self) -> bool {
        self.out.backlog_len() < outbox::BACKLOG_READ_LIMIT
    }

    /// Notes whether the session reads the probe; true once, when clients
    /// are to be told it stopped.
    pub fn note_reading(&mut self) -> bool {
        let stopped = !self.reading();
        self.unread.note(stopped, Instant::now())
    }

    /// Whether the session waits for room in the probe's stream.
    pub fn waiting_for_room(&self) -> bool {
        self.out.waiting_for_room()
    }

    /// Room in the queue, once the probe has read some of it.
    pub async fn room(&self) -> Option<Permit> {
        self.out.room().await
    }

    /// Room came back: the oldest backlogged message takes it.
    pub fn on_room(&mut self, permit: Permit) {
        self.out.on_room(permit);
    }

    /// How long a probe may leave what it was sent unread while something
    /// waits for it: two heartbeat intervals, as a quiet probe is given.
    fn stall_grace(&self) -> Duration {
        self.heartbeat * 2
    }

    /// When the session next has something to do for the stream: deem the
    /// probe gone, or tell clients it is not read.
    pub fn next_deadline(&self) -> Option<Instant> {
        let stall = self.out.stall_deadline(self.stall_grace());
        stall.into_iter().chain(self.unread.deadline()).min()
    }

    /// Why the probe is deemed gone at `now`, if it is: it read nothing of
    /// its stream for the grace while the daemon had messages for it.
    pub fn gone(&self, now: Instant) -> Option<String> {
        let due = self.out.stall_deadline(self.stall_grace())?;
        (due <= now).then(|| {
            format!(
                "the probe read nothing of its stream for {} s while the daemon had \
                 messages for it; its holds were given up and are re-reported when it reconnects",
                self.out.stalled_for().as_secs()
            )
        })
    }

    /// When the next heartbeat is due: the interval after the last message.
    pub fn heartbeat_at(&self) -> Instant {
        let quiet = now_us().saturating_sub(self.out.last_sent_us());
        let quiet = Duration::from_micros(u64::try_from(quiet).unwrap_or(0));
        heartbeat_due(Instant::now(), self.heartbeat, quiet)
    }

    /// The heartbeat timer fired: a heartbeat goes when the stream has been
    /// quiet for the interval. Returns when the timer is next due.
    pub fn on_heartbeat_timer(&mut self, last_seq: u64) -> Instant {
        if self.heartbeat_at() <= Instant::now() {
            self.out
                .heartbeat(Out::Heartbeat(HeartbeatEvent { last_seq }));
        }
        self.heartbeat_at()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_told_once_after_the_notice_delay() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut unread = Unread::default();
        // (reading stopped, at) → (tell now, deadline after)
        let steps = [
            (false, ms(0), false, None),
            (true, ms(0), false, Some(t0 + UNREAD_NOTICE_AFTER)),
            (true, ms(100), false, Some(t0 + UNREAD_NOTICE_AFTER)),
            (true, ms(500), true, None),
            (true, ms(900), false, None),
            (false, ms(1000), false, None),
            (
                true,
                ms(1100),
                false,
                Some(t0 + ms(1100) + UNREAD_NOTICE_AFTER),
            ),
        ];
        for (i, (stopped, at, tell, deadline)) in steps.into_iter().enumerate() {
            assert_eq!(unread.note(stopped, t0 + at), tell, "step {i}");
            assert_eq!(unread.deadline(), deadline, "step {i}");
        }
    }

    #[test]
    fn a_probe_asks_for_its_heartbeat_within_bounds() {
        let default = Duration::from_secs(15);
        let asks = |secs: Option<i64>| Hello {
            heartbeat_interval: secs.map(|seconds| prost_types::Duration { seconds, nanos: 0 }),
            ..Default::default()
        };
        let cases = [
            (None, default),
            (Some(5), Duration::from_secs(5)),
            (Some(0), HEARTBEAT_MIN),
            (Some(-3), default),
            (Some(100_000), HEARTBEAT_MAX),
        ];
        for (asked, interval) in cases {
            assert_eq!(
                heartbeat_interval(&asks(asked), default),
                interval,
                "{asked:?}"
            );
        }
    }

    #[test]
    fn a_heartbeat_is_due_an_interval_after_the_last_message() {
        let now = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(heartbeat_due(now, s(10), s(0)), now + s(10));
        assert_eq!(heartbeat_due(now, s(10), s(4)), now + s(6));
        assert_eq!(heartbeat_due(now, s(10), s(30)), now);
    }

    #[tokio::test]
    async fn a_probe_that_reads_nothing_is_gone_after_two_intervals() {
        let (tx, _rx) = tokio::sync::mpsc::channel(1);
        let mut transport = Transport::new(tx, Duration::from_secs(1));
        assert!(transport.gone(Instant::now()).is_none());
        transport.send(Out::Heartbeat(HeartbeatEvent::default()));
        let refused = transport
            .reserve()
            .map(drop)
            .expect_err("the queue is full");
        assert_eq!(refused.reason(), ErrorReason::ProbeNotReading);
        let now = Instant::now();
        assert_eq!(transport.gone(now), None);
        assert!(transport.gone(now + Duration::from_secs(2)).is_some());
        assert!(transport.next_deadline().is_some());
    }
}
