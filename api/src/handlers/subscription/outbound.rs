//! What a Subscribe stream holds for its client: one queue bounded in events
//! and in bytes, what is pending (the answer to a Watch, a catch-up from the
//! rings, a resynchronisation), and what is dropped, resynchronised or ends
//! the stream when the client falls behind.

use std::{collections::VecDeque, sync::Arc};

use stepd_core::{
    error::ApiError,
    events::{Charge, Filter, Published, StreamMemory, Wire, snapshot_parts},
};
use stepd_proto::v1::{ErrorReason, Event, Watch, event::Payload};
use tokio::{sync::broadcast, time::Instant};
use tonic::Status;

use super::{LIVE_BATCH, Out, Subscriber};

/// What a queued event is, for what may be dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A numbered event (live or replayed): dropped on overflow.
    Live,
    /// Part of the answer to a Watch or of a resynchronisation (`gap`,
    /// snapshot parts): dropped when superseded before it started to leave.
    Start,
    /// A stream-local message (`error`, `heartbeat`): always sent.
    Local,
}

/// What a message starts or completes, for the stream's bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    Other,
    Gap,
    /// A part of the snapshot taken at `seq`; `more` parts follow.
    Snapshot {
        seq: u64,
        more: bool,
    },
}

pub(super) struct Queued {
    pub(super) wire: Arc<Wire>,
    pub(super) kind: Kind,
    /// The event's seq; 0 for stream-local messages.
    pub(super) seq: u64,
    pub(super) part: Part,
    pub(super) charge: Charge,
}

impl Outbound {
    /// The next item to send, making what is pending when nothing is queued.
    pub(super) fn next_item(&mut self, subscriber: &Subscriber) -> Option<Queued> {
        if self.queue.is_empty()
            && let Some(pending) = self.pending.take()
        {
            subscriber.begin(self, pending);
        }
        self.queue.pop_front()
    }
}

/// What the stream will do once its queue is empty.
pub(super) enum Pending {
    /// Answer this Watch.
    Watch(Watch),
    /// Resynchronise: a gap after this seq, then a fresh snapshot.
    Resync(u64),
    /// Resuming: the next events after this seq, from the rings.
    CatchUp(u64),
}

/// Why a stream ends before its client or the daemon ends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Overrun {
    /// It held more than `--subscriber-buffer-bytes`.
    Stream,
    /// The daemon's subscribers held more than `--subscriber-bytes-total`
    /// and this stream held the most.
    Daemon,
    /// An event is larger than `--max-message-bytes`.
    Message(u64, usize),
}

/// The writing half of one stream and what it holds for the client.
pub(super) struct Outbound {
    pub(super) queue: VecDeque<Queued>,
    pub(super) memory: Arc<StreamMemory>,
    /// Count and bytes of the `Live` events in `queue`.
    pub(super) live_count: usize,
    pub(super) live_bytes: usize,
    /// A start group (gap, snapshot parts) has begun to leave and not ended.
    pub(super) mid_start: bool,
    pub(super) last_sent: Instant,
    pub(super) filter: Filter,
    pub(super) live: Option<broadcast::Receiver<Arc<Published>>>,
    pub(super) pending: Option<Pending>,
    /// Highest seq this stream has accounted for (queued or filtered out).
    pub(super) cursor: u64,
    /// Highest seq the client has been sent everything up to: the last
    /// event handed to its HTTP/2 stream, or the seq of a snapshot whose
    /// last part was. A resume from here loses nothing.
    pub(super) sent_through: u64,
    pub(super) buffer_events: usize,
    pub(super) buffer_bytes: usize,
    pub(super) max_message_bytes: usize,
    /// Set when the stream must end.
    pub(super) overrun: Option<Overrun>,
}

impl Outbound {
    pub(super) fn push(&mut self, wire: Arc<Wire>, kind: Kind, seq: u64, part: Part) {
        let charge = self.memory.queue(wire.len());
        if kind == Kind::Live {
            self.live_count += 1;
            self.live_bytes += charge.bytes();
        }
        self.queue.push_back(Queued {
            wire,
            kind,
            seq,
            part,
            charge,
        });
    }

    /// Queues a message made for this stream alone.
    pub(super) fn push_own(&mut self, event: &Event, kind: Kind, part: Part) {
        let wire = Arc::new(Wire::encode(event, self.memory.daemon()));
        self.push(wire, kind, 0, part);
    }

    /// Queues a numbered event, resynchronises over the count, or ends the
    /// stream over the bytes.
    pub(super) fn push_live(&mut self, event: &Published) {
        if self.live_count > 0 && self.live_count >= self.buffer_events {
            tracing::info!(
                held = self.live_count,
                bytes = self.live_bytes,
                "subscriber too slow; resynchronising"
            );
            let lost_from = self.drop_queued(true).unwrap_or(event.seq);
            self.resync_after(lost_from.saturating_sub(1));
            return;
        }
        let wire = event.wire(self.memory.daemon());
        if wire.message_len() > self.max_message_bytes {
            self.overrun = Some(Overrun::Message(event.seq, wire.message_len()));
            return;
        }
        // What the client has not read is what is queued and what is in
        // its HTTP/2 stream; an event alone is held whatever its size.
        let unread = self.live_bytes + self.memory.transport();
        if unread > 0 && unread + wire.len() > self.buffer_bytes {
            self.overrun = Some(Overrun::Stream);
            return;
        }
        self.push(wire, Kind::Live, event.seq, Part::Other);
    }

    /// Stops following live events; a gap after `after` and a snapshot
    /// follow once the queue is empty.
    pub(super) fn resync_after(&mut self, after: u64) {
        self.live = None;
        self.pending = Some(Pending::Resync(after));
    }

    /// Drops the start group that has not begun to leave (and the events
    /// queued after it, which follow from it), and with `live` every
    /// numbered event. Returns the seq of the first numbered event dropped.
    pub(super) fn drop_queued(&mut self, live: bool) -> Option<u64> {
        let mut keep_start = self.mid_start;
        let mut dropping = false;
        let mut first_lost = None;
        let queue = std::mem::take(&mut self.queue);
        for item in queue {
            let keep = match item.kind {
                Kind::Local => true,
                Kind::Start if keep_start => true,
                Kind::Start => {
                    dropping = true;
                    false
                }
                Kind::Live => !(live || dropping),
            };
            if item.kind != Kind::Start {
                keep_start = false;
            }
            if keep {
                self.queue.push_back(item);
            } else if item.kind == Kind::Live {
                first_lost = first_lost.or(Some(item.seq));
                self.live_count -= 1;
                self.live_bytes -= item.charge.bytes();
            }
        }
        first_lost
    }

    /// Takes the live events already waiting that the client's filter
    /// passes over, up to `LIVE_BATCH`: one pass of the stream's loop for a
    /// burst of other sessions' events, not one per event. It stops at the
    /// first event queued, so what the client takes is written as before.
    pub(super) fn take_ready(&mut self, client_name: &str) {
        for _ in 0..LIVE_BATCH {
            let Some(rx) = self
                .live
                .as_mut()
                .filter(|_| self.queue.is_empty() && self.overrun.is_none())
            else {
                return;
            };
            match rx.try_recv() {
                Ok(event) => self.take_live(&event),
                Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                    return self.lagged(missed, client_name);
                }
                // Closed is seen by the next `recv`, which ends the stream.
                Err(_) => return,
            }
        }
    }

    /// The live buffer moved on past this stream: resynchronise.
    pub(super) fn lagged(&mut self, missed: u64, client_name: &str) {
        tracing::info!(missed, client = %client_name, "subscriber lagged; resynchronising");
        self.resync_after(self.cursor);
    }

    /// Queues a live event the client's filter admits.
    pub(super) fn take_live(&mut self, event: &Published) {
        if event.seq <= self.cursor || self.overrun.is_some() {
            return;
        }
        self.cursor = event.seq;
        if self.filter.admits(event) {
            self.push_live(event);
        }
    }

    /// Queues a snapshot, in parts; the cursor goes on from it.
    pub(super) fn push_snapshot(&mut self, snapshot: Event, part_bytes: usize) {
        let Event {
            time,
            payload: Some(Payload::Snapshot(snapshot)),
            ..
        } = snapshot
        else {
            return;
        };
        self.cursor = snapshot.seq;
        for part in snapshot_parts(snapshot, part_bytes) {
            let (seq, more) = (part.seq, part.more);
            let event = Event {
                seq: 0,
                session_id: String::new(),
                time,
                payload: Some(Payload::Snapshot(part)),
            };
            self.push_own(&event, Kind::Start, Part::Snapshot { seq, more });
        }
    }

    /// Hands a message to the HTTP/2 stream.
    pub(super) fn send(&mut self, item: Queued, out: &Out, subscriber: &Subscriber) {
        match item.kind {
            Kind::Live => {
                self.live_count -= 1;
                self.live_bytes -= item.charge.bytes();
                self.sent_through = item.seq;
            }
            Kind::Start => {
                self.mid_start = match item.part {
                    Part::Snapshot { seq, more } => {
                        if !more {
                            self.sent_through = seq;
                        }
                        more
                    }
                    Part::Gap => {
                        subscriber.bus.counters().gap_sent();
                        true
                    }
                    Part::Other => true,
                };
            }
            Kind::Local => {}
        }
        let _ = out.send(Ok(self.memory.hand(item.wire)));
        self.last_sent = Instant::now();
    }

    /// The status a stream ends with when it held too much: what was
    /// exceeded, and where its client resumes from.
    pub(super) fn overrun_status(&self, overrun: Overrun, subscriber: &Subscriber) -> Status {
        let (limit, max, message) = match overrun {
            Overrun::Stream => (
                "subscriber_buffer_bytes",
                subscriber.buffer_bytes,
                format!(
                    "the client left more than {} bytes of events unread (--subscriber-buffer-bytes)",
                    subscriber.buffer_bytes
                ),
            ),
            Overrun::Daemon => {
                let limit = self.memory.daemon().limit();
                (
                    "subscriber_bytes_total",
                    limit,
                    format!(
                        "the daemon's subscribers held more than {limit} bytes unread (--subscriber-bytes-total), this stream the most"
                    ),
                )
            }
            Overrun::Message(seq, len) => (
                "max_message_bytes",
                subscriber.max_message_bytes,
                format!(
                    "event {seq} is {len} bytes encoded, more than --max-message-bytes ({})",
                    subscriber.max_message_bytes
                ),
            ),
        };
        let resume = self.sent_through;
        stepd_rpc::status::status(
            ApiError::new(
                ErrorReason::LimitExceeded,
                format!("{message}; resume after seq {resume} to lose nothing"),
            )
            .with("limit", limit)
            .with("max", max.to_string())
            .with("resume_after_seq", resume.to_string()),
        )
    }
}
