//! What a probe session sends its probe. Every message but a heartbeat is
//! control (a Resume, a refusal, an arming, an evaluation, a Reconnect) and
//! is never dropped: it goes into the stream's queue, or, when a probe that
//! stopped reading has let that queue fill, into a backlog sent in order as
//! room returns. Answers a client gives are not kept in the backlog: they
//! go out at once or are refused (`reserve_now`), so a pause is never
//! reported resolved while its Resume waits for a probe that may never read.

use std::{collections::VecDeque, time::Duration};

use stepd_proto::v1::{ConnectResponse, connect_response::Message as Out};
use tokio::{sync::mpsc, time::Instant};
use tonic::Status;

use stepd_core::time::now_us;

/// The stream's queue, as tonic reads it.
pub(crate) type Sender = mpsc::Sender<Result<ConnectResponse, Status>>;
/// Room for one message in the stream's queue, taken before anything changes.
pub(crate) type Permit = mpsc::OwnedPermit<Result<ConnectResponse, Status>>;

/// Backlogged messages past which the actor stops reading what the probe
/// sends: a probe that does not read its answers is not given more of them.
pub(crate) const BACKLOG_READ_LIMIT: usize = 64;

/// The outbound side of one probe stream.
pub(crate) struct Outbox {
    tx: Sender,
    /// Control messages that found the queue full, oldest first; at most one
    /// `Armed`, the latest, since only the latest arming matters.
    backlog: VecDeque<Out>,
    /// Since when the probe has left the queue full: set when a message
    /// found no room, cleared when room came back.
    stalled_since: Option<Instant>,
    /// When the last message went into the queue (µs since the epoch).
    last_sent_us: i64,
}

fn wrap(message: Out) -> Result<ConnectResponse, Status> {
    Ok(ConnectResponse {
        message: Some(message),
    })
}

impl Outbox {
    pub(crate) fn new(tx: Sender) -> Self {
        Self {
            tx,
            backlog: VecDeque::new(),
            stalled_since: None,
            last_sent_us: now_us(),
        }
    }

    /// Sends a control message: into the queue when nothing waits before it
    /// and there is room, else into the backlog.
    pub(crate) fn send(&mut self, message: Out) {
        if self.backlog.is_empty() {
            match self.tx.try_send(wrap(message)) {
                Ok(()) => {
                    self.last_sent_us = now_us();
                    return;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return,
                Err(mpsc::error::TrySendError::Full(Ok(ConnectResponse {
                    message: Some(message),
                }))) => return self.keep(message),
                Err(mpsc::error::TrySendError::Full(_)) => return,
            }
        }
        self.keep(message);
    }

    fn keep(&mut self, message: Out) {
        self.stalled_since.get_or_insert_with(Instant::now);
        if matches!(message, Out::Armed(_)) {
            self.backlog.retain(|m| !matches!(m, Out::Armed(_)));
        }
        self.backlog.push_back(message);
    }

    /// Room for one message now, or None when the probe has not read what
    /// it was sent (the queue is full or a backlog waits).
    pub(crate) fn reserve_now(&mut self) -> Option<Permit> {
        if !self.backlog.is_empty() {
            return None;
        }
        match self.tx.clone().try_reserve_owned() {
            Ok(permit) => Some(permit),
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.stalled_since.get_or_insert_with(Instant::now);
                None
            }
            Err(mpsc::error::TrySendError::Closed(_)) => None,
        }
    }

    /// Sends through room reserved earlier.
    pub(crate) fn send_reserved(&mut self, permit: Permit, message: Out) {
        permit.send(wrap(message));
        self.last_sent_us = now_us();
    }

    /// A heartbeat: the only message dropped when there is no room, since a
    /// probe with unread messages has no quiet stream to keep alive.
    pub(crate) fn heartbeat(&mut self, message: Out) {
        if self.backlog.is_empty() && self.tx.try_send(wrap(message)).is_ok() {
            self.last_sent_us = now_us();
        }
    }

    /// Whether the actor waits for room: something is backlogged, or an
    /// answer was refused for want of room and the stall is being timed.
    pub(crate) fn waiting_for_room(&self) -> bool {
        self.stalled_since.is_some()
    }

    /// Room in the queue, once the probe has read some of it.
    pub(crate) async fn room(&self) -> Option<Permit> {
        self.tx.clone().reserve_owned().await.ok()
    }

    /// Room came back: the oldest backlogged message takes it.
    pub(crate) fn on_room(&mut self, permit: Permit) {
        match self.backlog.pop_front() {
            Some(message) => self.send_reserved(permit, message),
            None => drop(permit),
        }
        if self.backlog.is_empty() {
            self.stalled_since = None;
        }
    }

    /// How many messages wait in the backlog.
    pub(crate) fn backlog_len(&self) -> usize {
        self.backlog.len()
    }

    /// When a probe that has read nothing since the queue filled is deemed
    /// gone: after `grace`.
    pub(crate) fn stall_deadline(&self, grace: Duration) -> Option<Instant> {
        self.stalled_since.map(|since| since + grace)
    }

    /// How long the probe has left the queue full.
    pub(crate) fn stalled_for(&self) -> Duration {
        self.stalled_since.map_or(Duration::ZERO, |s| s.elapsed())
    }

    /// µs since the epoch when the last message went into the queue.
    pub(crate) fn last_sent_us(&self) -> i64 {
        self.last_sent_us
    }
}

#[cfg(test)]
mod tests {
    use stepd_proto::v1::{Armed, HeartbeatEvent, Resume};

    use super::*;

    fn resume(id: &str) -> Out {
        Out::Resume(Resume {
            hit_id: id.into(),
            ..Default::default()
        })
    }

    fn armed(depth: u32) -> Out {
        Out::Armed(Armed {
            depth,
            ..Default::default()
        })
    }

    fn take(rx: &mut mpsc::Receiver<Result<ConnectResponse, Status>>) -> Option<Out> {
        rx.try_recv().ok().and_then(|m| m.ok()?.message)
    }

    #[tokio::test]
    async fn a_full_queue_keeps_control_messages_in_order_and_the_latest_arming() {
        let (tx, mut rx) = mpsc::channel(1);
        let mut outbox = Outbox::new(tx);
        outbox.send(resume("a"));
        outbox.send(armed(1));
        outbox.send(resume("b"));
        outbox.send(armed(2));
        outbox.heartbeat(Out::Heartbeat(HeartbeatEvent::default()));
        assert!(outbox.waiting_for_room());
        assert!(
            outbox.reserve_now().is_none(),
            "an answer waits for no backlog"
        );
        assert_eq!(outbox.backlog_len(), 2, "resume b, then the latest arming");
        let mut seen = Vec::new();
        while let Some(m) = take(&mut rx) {
            seen.push(m);
            if let Some(permit) = outbox.room().await.filter(|_| outbox.backlog_len() > 0) {
                outbox.on_room(permit);
            }
        }
        assert_eq!(seen, vec![resume("a"), resume("b"), armed(2)]);
        assert!(!outbox.waiting_for_room());
        assert!(outbox.reserve_now().is_some());
    }

    #[tokio::test]
    async fn a_refused_answer_starts_the_stall_clock_and_room_stops_it() {
        let (tx, mut rx) = mpsc::channel(1);
        let mut outbox = Outbox::new(tx);
        outbox.send(resume("a"));
        assert!(outbox.stall_deadline(Duration::from_secs(1)).is_none());
        assert!(outbox.reserve_now().is_none());
        assert!(outbox.stall_deadline(Duration::from_secs(1)).is_some());
        assert!(take(&mut rx).is_some());
        let permit = outbox.room().await.expect("room");
        outbox.on_room(permit);
        assert!(outbox.stall_deadline(Duration::from_secs(1)).is_none());
    }
}
