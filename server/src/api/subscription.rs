//! One Subscribe stream: reads the client's Watch / DebugInput / Heartbeat
//! messages and writes events, resynchronising when the client falls behind
//! and ending the stream when what it holds unread passes its bound.
//!
//! What waits for the client is held here, in one queue bounded in events and
//! in bytes, and the task never waits on the client: it keeps reading the live
//! broadcast (so the shared buffer never holds anything for it) and the
//! client's messages. Messages are handed to the HTTP/2 stream while it holds
//! less than [`Subscriber::transport_window`] bytes not yet written out.
//!
//! Over the count (`--subscriber-buffer`), the events queued are dropped and,
//! once what is already on its way has gone, the client gets a `gap` and a
//! fresh snapshot. Over the bytes (`--subscriber-buffer-bytes`, counting the
//! events queued and everything in the HTTP/2 stream), or when the daemon's
//! bound (`--subscriber-bytes-total`) picks this stream, the stream ends
//! with `LIMIT_EXCEEDED` and the seq the client was last sent, from which a
//! resume loses nothing. The answer to a Watch (a snapshot, a replay, or a
//! gap and a snapshot) is made only once the queue is empty, and a Watch
//! replaces an answer that has not started to leave; so the queue holds at
//! most one snapshot, however many Watches a client sends without reading.

use std::{collections::VecDeque, future::Future, pin::Pin, sync::Arc, time::Duration};

use bytes::Bytes;
use stepd_proto::v1::{
    DebugInput, ErrorReason, Event, HeartbeatEvent, Reconnect, SubscribeRequest, Watch,
    event::Payload, subscribe_request::Message,
};
use tokio::{
    sync::{broadcast, mpsc},
    time::{Instant, sleep_until},
};
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tonic::Status;

use stepd_core::{
    error::{ApiError, ApiResult},
    events::{
        CatchUp, Charge, EventBus, Filter, Published, Start, StreamMemory, Wire, snapshot_parts,
    },
    time::now_timestamp,
};

/// Where a stream's debug inputs go: the sessions' pauses, handed in from
/// above so events never reach up into sessions.
pub type Answerer = Arc<
    dyn Fn(DebugInput, String) -> Pin<Box<dyn Future<Output = ApiResult<()>> + Send>> + Send + Sync,
>;

/// Debug inputs of one stream waiting for their answers at once; more are
/// refused, so one client cannot pile up work.
const INPUTS_IN_FLIGHT: usize = 64;

/// Most live events one pass of a stream's loop takes, so a flood does not
/// keep the stream from its client's messages.
const LIVE_BATCH: usize = 256;

/// Most events of the rings a resuming stream looks at at once (the
/// `--subscriber-buffer` count when lower, so a batch never overflows it).
const CATCH_UP_EVENTS: usize = 1024;

/// Everything a Subscribe stream needs from the daemon.
pub struct Subscriber {
    /// Where events come from.
    pub bus: Arc<EventBus>,
    /// Where debug inputs go.
    pub answer: Answerer,
    /// Ends the stream on daemon shutdown.
    pub shutdown: CancellationToken,
    /// Quiet time after which a heartbeat is sent.
    pub heartbeat: Duration,
    /// Default name of this client in `pause_resolved.by`.
    pub client_name: String,
    /// Most events held for the client before it is resynchronised.
    pub buffer_events: usize,
    /// Most bytes of events held for the client, queued or in its HTTP/2
    /// stream, before the stream is ended (one event larger than this is
    /// still held, alone).
    pub buffer_bytes: usize,
    /// Largest part of a snapshot, in bytes.
    pub part_bytes: usize,
    /// Largest message sent (`--max-message-bytes`).
    pub max_message_bytes: usize,
    /// Bytes handed to the HTTP/2 stream and not yet written out past which
    /// nothing more is handed to it.
    pub transport_window: usize,
    /// What the stream holds, counted toward its bound and the daemon's.
    pub memory: Arc<StreamMemory>,
    /// For a peer replica's relay: only the sessions this daemon runs.
    pub only_own: Option<stepd_core::events::Own>,
}

/// Where a stream's messages go: encoded gRPC messages for the HTTP/2
/// stream, then the status it ends with (none: OK).
pub type Out = mpsc::UnboundedSender<Result<Bytes, Status>>;

/// What a queued event is, for what may be dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
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
enum Part {
    Other,
    Gap,
    /// A part of the snapshot taken at `seq`; `more` parts follow.
    Snapshot {
        seq: u64,
        more: bool,
    },
}

struct Queued {
    wire: Arc<Wire>,
    kind: Kind,
    /// The event's seq; 0 for stream-local messages.
    seq: u64,
    part: Part,
    charge: Charge,
}

impl Outbound {
    /// The next item to send, making what is pending when nothing is queued.
    fn next_item(&mut self, subscriber: &Subscriber) -> Option<Queued> {
        if self.queue.is_empty()
            && let Some(pending) = self.pending.take()
        {
            subscriber.begin(self, pending);
        }
        self.queue.pop_front()
    }
}

/// What the stream will do once its queue is empty.
enum Pending {
    /// Answer this Watch.
    Watch(Watch),
    /// Resynchronise: a gap after this seq, then a fresh snapshot.
    Resync(u64),
    /// Resuming: the next events after this seq, from the rings.
    CatchUp(u64),
}

/// Why a stream ends before its client or the daemon ends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overrun {
    /// It held more than `--subscriber-buffer-bytes`.
    Stream,
    /// The daemon's subscribers held more than `--subscriber-bytes-total`
    /// and this stream held the most.
    Daemon,
    /// An event is larger than `--max-message-bytes`.
    Message(u64, usize),
}

/// The writing half of one stream and what it holds for the client.
struct Outbound {
    queue: VecDeque<Queued>,
    memory: Arc<StreamMemory>,
    /// Count and bytes of the `Live` events in `queue`.
    live_count: usize,
    live_bytes: usize,
    /// A start group (gap, snapshot parts) has begun to leave and not ended.
    mid_start: bool,
    last_sent: Instant,
    filter: Filter,
    live: Option<broadcast::Receiver<Arc<Published>>>,
    pending: Option<Pending>,
    /// Highest seq this stream has accounted for (queued or filtered out).
    cursor: u64,
    /// Highest seq the client has been sent everything up to: the last
    /// event handed to its HTTP/2 stream, or the seq of a snapshot whose
    /// last part was. A resume from here loses nothing.
    sent_through: u64,
    buffer_events: usize,
    buffer_bytes: usize,
    max_message_bytes: usize,
    /// Set when the stream must end.
    overrun: Option<Overrun>,
}

impl Outbound {
    fn push(&mut self, wire: Arc<Wire>, kind: Kind, seq: u64, part: Part) {
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
    fn push_own(&mut self, event: &Event, kind: Kind, part: Part) {
        let wire = Arc::new(Wire::encode(event, self.memory.daemon()));
        self.push(wire, kind, 0, part);
    }

    /// Queues a numbered event, resynchronises over the count, or ends the
    /// stream over the bytes.
    fn push_live(&mut self, event: &Published) {
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
    fn resync_after(&mut self, after: u64) {
        self.live = None;
        self.pending = Some(Pending::Resync(after));
    }

    /// Drops the start group that has not begun to leave (and the events
    /// queued after it, which follow from it), and with `live` every
    /// numbered event. Returns the seq of the first numbered event dropped.
    fn drop_queued(&mut self, live: bool) -> Option<u64> {
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
    fn take_ready(&mut self, client_name: &str) {
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
    fn lagged(&mut self, missed: u64, client_name: &str) {
        tracing::info!(missed, client = %client_name, "subscriber lagged; resynchronising");
        self.resync_after(self.cursor);
    }

    /// Queues a live event the client's filter admits.
    fn take_live(&mut self, event: &Published) {
        if event.seq <= self.cursor || self.overrun.is_some() {
            return;
        }
        self.cursor = event.seq;
        if self.filter.admits(event) {
            self.push_live(event);
        }
    }

    /// Queues a snapshot, in parts; the cursor goes on from it.
    fn push_snapshot(&mut self, snapshot: Event, part_bytes: usize) {
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
    fn send(&mut self, item: Queued, out: &Out, subscriber: &Subscriber) {
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
    fn overrun_status(&self, overrun: Overrun, subscriber: &Subscriber) -> Status {
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
        crate::status::status(
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

async fn next_live(
    rx: &mut Option<broadcast::Receiver<Arc<Published>>>,
) -> Result<Arc<Published>, broadcast::error::RecvError> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl Subscriber {
    /// Runs the stream until the client leaves, the daemon shuts down, or
    /// the client leaves more unread than its bound.
    pub async fn run<S>(self, mut inbound: S, out: Out)
    where
        S: Stream<Item = Result<SubscribeRequest, Status>> + Unpin,
    {
        let memory = self.memory.clone();
        let mut st = Outbound {
            queue: VecDeque::new(),
            memory: memory.clone(),
            live_count: 0,
            live_bytes: 0,
            mid_start: false,
            last_sent: Instant::now(),
            filter: Filter::default(),
            live: None,
            pending: None,
            cursor: 0,
            sent_through: 0,
            buffer_events: self.buffer_events.max(1),
            buffer_bytes: self.buffer_bytes.max(1),
            max_message_bytes: self.max_message_bytes,
            overrun: None,
        };
        self.serve(&mut st, &mut inbound, &out).await;
        if let Some(overrun) = st.overrun {
            let status = st.overrun_status(overrun, &self);
            tracing::info!(
                %status,
                held = memory.held(),
                client = %self.client_name,
                "subscriber ended for what it left unread"
            );
            // What was handed over reaches the client before the status;
            // the rest is dropped now, not when the client reads.
            st.queue.clear();
            let _ = out.send(Err(status));
        }
        drop(st);
        memory.let_go();
    }

    async fn serve<S>(&self, st: &mut Outbound, inbound: &mut S, out: &Out)
    where
        S: Stream<Item = Result<SubscribeRequest, Status>> + Unpin,
    {
        let mut client_name = self.client_name.clone();
        // A client may half-close its side (grpcurl does at the end of its
        // input) and still want events, so only stop reading, not writing.
        let mut reading = true;
        // Answers run beside the stream (an EVAL may wait on the program), and
        // their failures come back here to be written as `error` events.
        let (failures_tx, mut failures) = mpsc::unbounded_channel::<Event>();
        let in_flight = Arc::new(tokio::sync::Semaphore::new(INPUTS_IN_FLIGHT));
        // One timer, moved only when something was sent: re-arming it on
        // every pass would cost a timer-wheel update per event seen.
        let heartbeat = sleep_until(st.last_sent + self.heartbeat);
        tokio::pin!(heartbeat);
        let memory = self.memory.clone();
        // Shutting down, a relay sends what is left before it ends.
        let mut closing = false;
        loop {
            let heartbeat_at = st.last_sent + self.heartbeat;
            if heartbeat.deadline() != heartbeat_at {
                heartbeat.as_mut().reset(heartbeat_at);
            }
            let open = tokio::select! {
                biased;
                _ = self.shutdown.cancelled(), if !closing => {
                    // A peer's relay first takes what is left: the ends of
                    // the sessions this replica ran (its token is cancelled
                    // once they ended).
                    closing = self.only_own.is_some();
                    closing
                }
                () = out.closed() => false,
                () = memory.evicted() => {
                    st.overrun = Some(Overrun::Daemon);
                    false
                }
                // What is pending is made only when the client can take
                // something and nothing is queued before it: Watches sent to
                // a stream that does not read replace each other for free.
                () = memory.room(self.transport_window), if !st.queue.is_empty() || st.pending.is_some() => {
                    while memory.transport() < self.transport_window {
                        let Some(item) = st.next_item(self) else {
                            break;
                        };
                        st.send(item, out, self);
                    }
                    true
                }
                message = inbound.next(), if reading => match message {
                    Some(Ok(SubscribeRequest { message: Some(Message::Watch(watch)) })) => {
                        match stepd_core::limits::watch(&watch).and_then(|()| Filter::check(&watch)) {
                            Err(err) => st.push_own(&local(Payload::Error(err.to_stream_error(""))), Kind::Local, Part::Other),
                            Ok(()) => {
                                if !watch.client_name.is_empty() {
                                    client_name.clone_from(&watch.client_name);
                                }
                                // The answer to an earlier Watch that has not
                                // started to leave is replaced by this one's.
                                st.drop_queued(false);
                                st.live = None;
                                st.pending = Some(Pending::Watch(watch));
                            }
                        }
                        true
                    }
                    Some(Ok(SubscribeRequest { message: Some(Message::DebugInput(input)) })) => {
                        let key = input.key.clone();
                        let by = if input.client_name.is_empty() { client_name.clone() } else { input.client_name.clone() };
                        let failures_tx = failures_tx.clone();
                        match in_flight.clone().try_acquire_owned() {
                            Ok(permit) => {
                                let answering = (self.answer)(input, by);
                                tokio::spawn(async move {
                                    if let Err(err) = answering.await {
                                        let _ = failures_tx.send(local(Payload::Error(err.to_stream_error(&key))));
                                    }
                                    drop(permit);
                                });
                            }
                            Err(_) => {
                                let err = ApiError::new(
                                    ErrorReason::LimitExceeded,
                                    format!("{INPUTS_IN_FLIGHT} debug inputs of this stream are still being answered"),
                                )
                                .with("limit", "inputs_in_flight")
                                .with("max", INPUTS_IN_FLIGHT.to_string());
                                let _ = failures_tx.send(local(Payload::Error(err.to_stream_error(&key))));
                            }
                        }
                        true
                    }
                    Some(Ok(_)) => true,
                    Some(Err(status)) => {
                        tracing::debug!(%status, "subscriber stream failed");
                        // Ending with OK would read as a daemon shutdown; a
                        // malformed message ends the stream saying so.
                        if crate::malformed::is_decode_failure(&status) {
                            let _ = out.send(Err(crate::malformed::refusal(&status)));
                        }
                        false
                    }
                    None => {
                        reading = false;
                        true
                    }
                },
                Some(failure) = failures.recv() => {
                    st.push_own(&failure, Kind::Local, Part::Other);
                    true
                }
                received = next_live(&mut st.live) => match received {
                    Ok(event) => {
                        st.take_live(&event);
                        st.take_ready(&client_name);
                        true
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        st.lagged(missed, &client_name);
                        true
                    }
                    Err(broadcast::error::RecvError::Closed) => false,
                },
                () = &mut heartbeat, if st.queue.is_empty() => {
                    let last_seq = self.bus.last_seq();
                    st.push_own(&local(Payload::Heartbeat(HeartbeatEvent { last_seq })), Kind::Local, Part::Other);
                    // A heartbeat counts as sent once queued, so a stream
                    // that cannot take it does not queue another.
                    st.last_sent = Instant::now();
                    true
                }
            };
            if !open || st.overrun.is_some() {
                if !open && st.overrun.is_none() && self.shutdown.is_cancelled() {
                    // Told, not waited for: a client that does not read
                    // learns it from the stream's end.
                    let reconnect = Reconnect {
                        reason: "the daemon is shutting down".into(),
                    };
                    let wire = Wire::encode(&local(Payload::Reconnect(reconnect)), memory.daemon());
                    let _ = out.send(Ok(memory.hand(Arc::new(wire))));
                }
                return;
            }
            if closing
                && st.queue.is_empty()
                && st.pending.is_none()
                && st.live.as_ref().is_none_or(broadcast::Receiver::is_empty)
            {
                let reconnect = Reconnect {
                    reason: "the daemon is shutting down".into(),
                };
                let wire = Wire::encode(&local(Payload::Reconnect(reconnect)), memory.daemon());
                let _ = out.send(Ok(memory.hand(Arc::new(wire))));
                return;
            }
            memory.daemon().enforce();
        }
    }

    /// Makes what was pending: the answer to a Watch, or a resynchronisation.
    fn begin(&self, st: &mut Outbound, pending: Pending) {
        match pending {
            Pending::Watch(watch) => {
                st.filter = match &self.only_own {
                    Some(own) => Filter::from_watch(&watch).only_own(own.clone()),
                    None => Filter::from_watch(&watch),
                };
                // The client holds what it had up to where it resumes; a
                // fresh Watch has nothing to resume from until its snapshot
                // has left whole.
                st.sent_through = watch.resume_after_seq;
                if watch.resume_after_seq > 0 {
                    st.cursor = watch.resume_after_seq;
                    self.catch_up(st, watch.resume_after_seq, &watch.resume_instance_id);
                    return;
                }
                let (start, rx) = self.bus.subscribe(&st.filter, None, "");
                st.live = Some(rx);
                if let Start::Snapshot(snapshot) = start {
                    st.push_snapshot(*snapshot, self.part_bytes);
                }
            }
            Pending::CatchUp(after) => self.catch_up(st, after, ""),
            Pending::Resync(after) => {
                let (gap, snapshot, rx) = self.bus.resync(&st.filter, after);
                // What the stream lost is what its gap spans.
                if let Some(Payload::Gap(g)) = &gap.payload {
                    self.bus
                        .counters()
                        .dropped((g.to_seq + 1).saturating_sub(g.from_seq));
                }
                st.live = Some(rx);
                st.push_own(&gap, Kind::Start, Part::Gap);
                st.push_snapshot(snapshot, self.part_bytes);
            }
        }
    }
}

impl Subscriber {
    /// Queues the next events after `after` from the rings, about one
    /// transport window of them: the rest are taken as the client reads, so
    /// a resume from far back holds a cursor, not the events. Once caught
    /// up, the stream follows the live broadcast.
    fn catch_up(&self, st: &mut Outbound, after: u64, instance: &str) {
        let (budget, most) = (
            self.transport_window,
            self.buffer_events.clamp(1, CATCH_UP_EVENTS),
        );
        let (events, next) = match self.bus.catch_up(&st.filter, after, instance, budget, most) {
            CatchUp::More { events, through } => (events, Some(through)),
            CatchUp::Caught { events, rx } => {
                st.live = Some(rx);
                (events, None)
            }
            CatchUp::Lost { gap, snapshot, rx } => {
                st.live = Some(rx);
                st.push_own(&gap, Kind::Start, Part::Gap);
                st.push_snapshot(*snapshot, self.part_bytes);
                return;
            }
        };
        for event in events {
            st.cursor = event.seq;
            st.push_live(&event);
            if st.pending.is_some() || st.overrun.is_some() {
                // Overflowed: a resynchronisation follows, or the stream ends.
                return;
            }
        }
        if let Some(through) = next {
            st.cursor = through;
            st.pending = Some(Pending::CatchUp(through));
        }
    }
}

/// A stream-local event (not numbered, never replayed).
fn local(payload: Payload) -> Event {
    Event {
        seq: 0,
        session_id: String::new(),
        time: Some(now_timestamp()),
        payload: Some(payload),
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;
    use stepd_proto::v1::{Notification, Snapshot, SubscribeResponse};
    use tokio_stream::wrappers::ReceiverStream;

    use super::*;
    use stepd_core::{events::SubscriberMemory, slots::Slots};

    fn subscriber(bus: Arc<EventBus>, memory: &Arc<SubscriberMemory>) -> Subscriber {
        Subscriber {
            bus,
            answer: Arc::new(|_, _| Box::pin(async { Ok(()) })),
            shutdown: CancellationToken::new(),
            heartbeat: Duration::from_secs(3600),
            client_name: "test".into(),
            buffer_events: 1000,
            buffer_bytes: 1 << 20,
            part_bytes: 1 << 20,
            max_message_bytes: 16 << 20,
            transport_window: 1 << 20,
            memory: memory.stream(Slots::unlimited("test").take("t").unwrap()),
            only_own: None,
        }
    }

    /// A client's side of a stream: it reads a message by taking it off the
    /// HTTP/2 stream, and does not read by leaving it there.
    struct Client {
        rx: mpsc::UnboundedReceiver<Result<Bytes, Status>>,
    }

    impl Client {
        /// Starts `subscriber`; the client sends what goes into the sender.
        fn start(subscriber: Subscriber) -> (Self, mpsc::Sender<Result<SubscribeRequest, Status>>) {
            let (in_tx, in_rx) = mpsc::channel(128);
            let (out, rx) = mpsc::unbounded_channel();
            tokio::spawn(subscriber.run(ReceiverStream::new(in_rx), out));
            (Self { rx }, in_tx)
        }

        /// The next message, or the status the stream ended with.
        async fn next_or_end(&mut self) -> Result<Event, Status> {
            let message = tokio::time::timeout(Duration::from_secs(10), self.rx.recv())
                .await
                .expect("a message in time")
                .unwrap_or_else(|| Err(Status::ok("")))?;
            let response = SubscribeResponse::decode(&message[5..]).expect("a response");
            Ok(response.event.expect("an event"))
        }

        async fn next_event(&mut self) -> Event {
            self.next_or_end().await.expect("not the end")
        }

        async fn next(&mut self) -> Payload {
            self.next_event().await.payload.expect("a payload")
        }
    }

    fn watch() -> Result<SubscribeRequest, Status> {
        Ok(SubscribeRequest {
            message: Some(Message::Watch(Watch::default())),
        })
    }

    fn note(bus: &EventBus, bytes: usize) -> u64 {
        bus.publish(
            "",
            Payload::Notification(Notification {
                message: "x".repeat(bytes),
                ..Default::default()
            }),
        )
        .seq
    }

    /// Waits until the subscriber has taken every client message.
    async fn drained(tx: &mpsc::Sender<Result<SubscribeRequest, Status>>) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while tx.capacity() < tx.max_capacity() {
            assert!(Instant::now() < deadline, "the subscriber stopped reading");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until `memory` holds `bytes`.
    async fn holds(memory: &StreamMemory, check: impl Fn(usize) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !check(memory.held()) {
            assert!(Instant::now() < deadline, "held {}", memory.held());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn watches_a_client_does_not_read_replace_each_others_snapshots() {
        let bus = Arc::new(EventBus::new("i".into(), 1, 64, 64));
        let memory = SubscriberMemory::new(usize::MAX);
        let (mut client, in_tx) = Client::start(Subscriber {
            // One message at a time in the HTTP/2 stream.
            transport_window: 1,
            ..subscriber(bus.clone(), &memory)
        });
        for _ in 0..100 {
            in_tx.send(watch()).await.unwrap();
        }
        drained(&in_tx).await;
        let last = note(&bus, 10);
        // The first answer was already on its way; of the 99 others only the
        // last is made, once the client reads, so it already holds the event.
        let Payload::Snapshot(Snapshot { seq: first, .. }) = client.next().await else {
            panic!("expected the first Watch's snapshot")
        };
        assert!(first < last);
        let Payload::Snapshot(Snapshot { seq, .. }) = client.next().await else {
            panic!("expected the last Watch's snapshot")
        };
        assert_eq!(seq, last);
        let after = note(&bus, 10);
        let Payload::Notification(_) = client.next().await else {
            panic!("expected the event after the snapshot")
        };
        assert!(after > seq);
        assert!(client.rx.try_recv().is_err(), "nothing more");
    }

    #[tokio::test]
    async fn a_flood_of_other_sessions_passes_a_narrow_watch_by_in_order() {
        let bus = Arc::new(EventBus::new("i".into(), 1, 4096, 64));
        let memory = SubscriberMemory::new(usize::MAX);
        let (mut client, in_tx) = Client::start(subscriber(bus.clone(), &memory));
        in_tx
            .send(Ok(SubscribeRequest {
                message: Some(Message::Watch(Watch {
                    session_ids: vec!["a".into()],
                    ..Default::default()
                })),
            }))
            .await
            .unwrap();
        let Payload::Snapshot(_) = client.next().await else {
            panic!("expected a snapshot")
        };
        // More events of another session than one pass takes, with the
        // watched session's among them: those arrive, in order, and no gap.
        let mut mine = Vec::new();
        for i in 0..3 * LIVE_BATCH {
            let sid = if i % 100 == 99 { "a" } else { "b" };
            let seq = bus
                .publish(sid, Payload::Notification(Notification::default()))
                .seq;
            if sid == "a" {
                mine.push(seq);
            }
        }
        let mut seen = Vec::new();
        while seen.len() < mine.len() {
            let event = client.next_event().await;
            assert!(
                matches!(event.payload, Some(Payload::Notification(_))),
                "{event:?}"
            );
            assert_eq!(event.session_id, "a");
            seen.push(event.seq);
        }
        assert_eq!(seen, mine);
    }

    #[tokio::test]
    async fn a_subscriber_over_its_count_gets_a_gap_then_a_snapshot() {
        let bus = Arc::new(EventBus::new("i".into(), 1, 4096, 64));
        let memory = SubscriberMemory::new(usize::MAX);
        let (mut client, in_tx) = Client::start(Subscriber {
            buffer_events: 4,
            transport_window: 1,
            ..subscriber(bus.clone(), &memory)
        });
        in_tx.send(watch()).await.unwrap();
        let Payload::Snapshot(snapshot) = client.next().await else {
            panic!("expected a snapshot")
        };
        // Ten events: the first is handed over, four are queued, the sixth
        // overflows and everything queued is dropped.
        let seqs: Vec<u64> = (0..10).map(|_| note(&bus, 100)).collect();
        assert!(seqs[0] > snapshot.seq);
        let mut seen = Vec::new();
        let gap = loop {
            match client.next().await {
                Payload::Notification(_) => seen.push(()),
                Payload::Gap(gap) => break gap,
                other => panic!("unexpected {other:?}"),
            }
        };
        assert!(!seen.is_empty() && seen.len() < 10, "{}", seen.len());
        assert_eq!(
            gap.from_seq,
            seqs[seen.len()],
            "the gap starts at the first event dropped"
        );
        assert_eq!(gap.to_seq, *seqs.last().unwrap());
        let Payload::Snapshot(after) = client.next().await else {
            panic!("expected a snapshot after the gap")
        };
        assert_eq!(after.seq, gap.to_seq);
        let later = note(&bus, 10);
        let Payload::Notification(_) = client.next().await else {
            panic!("the stream goes on after the resync")
        };
        assert!(later > after.seq);
    }

    /// The status a stream ended with: its `limit` and `resume_after_seq`.
    fn ended_at(status: &Status) -> (String, u64) {
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
        let err = crate::status::error_of(status);
        assert_eq!(err.reason(), ErrorReason::LimitExceeded, "{status:?}");
        let info = tonic_types::StatusExt::get_details_error_info(status).expect("ErrorInfo");
        (
            info.metadata["limit"].clone(),
            info.metadata["resume_after_seq"].parse().unwrap(),
        )
    }

    #[tokio::test]
    async fn a_subscriber_over_its_bytes_is_ended_where_it_can_resume() {
        let bus = Arc::new(EventBus::new("i".into(), 1, 4096, 64));
        let memory = SubscriberMemory::new(usize::MAX);
        let (mut client, in_tx) = Client::start(Subscriber {
            buffer_bytes: 10_000,
            transport_window: 1,
            ..subscriber(bus.clone(), &memory)
        });
        in_tx.send(watch()).await.unwrap();
        let Payload::Snapshot(snapshot) = client.next().await else {
            panic!("expected a snapshot")
        };
        // Ten 3 KB events: one is handed over, two more fit 10 KB beside
        // it, the next overflows: the stream ends.
        let seqs: Vec<u64> = (0..10).map(|_| note(&bus, 3_000)).collect();
        assert!(seqs[0] > snapshot.seq);
        let mut seen = Vec::new();
        let status = loop {
            match client.next_or_end().await {
                Ok(event) => seen.push(event.seq),
                Err(status) => break status,
            }
        };
        assert!(!seen.is_empty() && seen.len() < 10, "{seen:?}");
        assert_eq!(
            seen,
            seqs[..seen.len()],
            "what was handed over arrives first"
        );
        let (limit, resume) = ended_at(&status);
        assert_eq!(limit, "subscriber_buffer_bytes");
        assert_eq!(
            resume,
            *seen.last().unwrap(),
            "it resumes after what it was sent"
        );
        assert_eq!(memory.held(), 0, "nothing is held for it any more");

        // Resumed, it gets every event after that, exactly once, and goes on.
        let (mut resumed, in_tx) = Client::start(subscriber(bus.clone(), &memory));
        in_tx
            .send(Ok(SubscribeRequest {
                message: Some(Message::Watch(Watch {
                    resume_after_seq: resume,
                    ..Default::default()
                })),
            }))
            .await
            .unwrap();
        let later = note(&bus, 10);
        for &seq in seqs[seen.len()..].iter().chain([&later]) {
            assert_eq!(resumed.next_event().await.seq, seq);
        }
        drop(in_tx);
    }

    #[tokio::test]
    async fn a_resume_from_far_back_takes_the_rings_as_the_client_reads() {
        let bus = Arc::new(EventBus::new("i".into(), 1, 64, 10_000));
        let memory = SubscriberMemory::new(usize::MAX);
        let from = note(&bus, 10);
        // Far more than the stream may hold: 2 MB of events in the rings.
        let seqs: Vec<u64> = (0..1_000).map(|_| note(&bus, 2_000)).collect();
        let sub = Subscriber {
            buffer_bytes: 100_000,
            transport_window: 10_000,
            ..subscriber(bus.clone(), &memory)
        };
        let stream = sub.memory.clone();
        let (mut client, in_tx) = Client::start(sub);
        in_tx
            .send(Ok(SubscribeRequest {
                message: Some(Message::Watch(Watch {
                    resume_after_seq: from,
                    ..Default::default()
                })),
            }))
            .await
            .unwrap();
        let first = client.next_event().await;
        assert_eq!(first.seq, seqs[0]);
        // Not reading, it holds a window and a batch, not the rings.
        holds(&stream, |held| held > 0).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(stream.held() < 30_000, "held {}", stream.held());
        let mut seen = vec![first.seq];
        let live = loop {
            let event = client.next_event().await;
            seen.push(event.seq);
            if seen.len() == seqs.len() {
                // Caught up: what is published now comes live.
                break note(&bus, 10);
            }
        };
        assert_eq!(seen, seqs, "every event once, in order");
        assert_eq!(client.next_event().await.seq, live);
        drop(in_tx);
    }

    #[tokio::test]
    async fn over_the_daemons_bound_the_stream_holding_the_most_is_ended() {
        let bus = Arc::new(EventBus::new("i".into(), 1, 4096, 64));
        let memory = SubscriberMemory::new(20_000);
        let reading_sub = subscriber(bus.clone(), &memory);
        let (mut reading, reading_tx) = Client::start(reading_sub);
        let (mut idle, idle_tx) = Client::start(Subscriber {
            transport_window: 1,
            ..subscriber(bus.clone(), &memory)
        });
        for tx in [&reading_tx, &idle_tx] {
            tx.send(watch()).await.unwrap();
        }
        let Payload::Snapshot(_) = reading.next().await else {
            panic!("expected a snapshot")
        };
        let Payload::Snapshot(_) = idle.next().await else {
            panic!("expected a snapshot")
        };
        // Each event is held once for both; the idle stream's queue grows
        // past the daemon's 20 KB long before its own 1 MB.
        let mut seqs = Vec::new();
        for _ in 0..20 {
            seqs.push(note(&bus, 3_000));
            assert_eq!(
                reading.next_event().await.seq,
                *seqs.last().unwrap(),
                "the reader reads on"
            );
        }
        let status = loop {
            match idle.next_or_end().await {
                Ok(_) => {}
                Err(status) => break status,
            }
        };
        let (limit, resume) = ended_at(&status);
        assert_eq!(limit, "subscriber_bytes_total");
        assert_eq!(resume, seqs[0]);
        let later = note(&bus, 10);
        assert_eq!(reading.next_event().await.seq, later);
        drop((reading_tx, idle_tx));
    }
}
