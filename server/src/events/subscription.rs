//! One Subscribe stream: reads the client's Watch / DebugInput / Heartbeat
//! messages and writes events, resynchronising when the client falls behind.
//!
//! What waits for the client is held here, in one queue bounded in events and
//! in bytes, and the task never waits on the client: it keeps reading the live
//! broadcast (so the shared buffer never holds anything for it) and the
//! client's messages. When the queue overflows, the events in it are dropped
//! and, once what is already on its way has gone, the client gets a `gap` and
//! a fresh snapshot. The answer to a Watch (a snapshot, a replay, or a gap and
//! a snapshot) is made only once the queue is empty, and a Watch replaces an
//! answer that has not started to leave; so the queue holds at most one
//! snapshot, however many Watches a client sends without reading.

use std::{collections::VecDeque, future::Future, pin::Pin, sync::Arc, time::Duration};

use prost::Message as _;

use stepd_proto::v1::{
    DebugInput, Event, HeartbeatEvent, Reconnect, SubscribeRequest, SubscribeResponse, Watch,
    event::Payload, subscribe_request::Message,
};
use tokio::{
    sync::{broadcast, mpsc},
    time::{Instant, sleep_until},
};
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::{EventBus, Filter, Start, view::snapshot_parts};
use crate::{
    error::{ApiError, ApiResult},
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
    /// Most bytes of events held for the client before it is resynchronised
    /// (one event larger than this is still held, alone).
    pub buffer_bytes: usize,
    /// Largest part of a snapshot, in bytes.
    pub part_bytes: usize,
    /// For a peer replica's relay: only the sessions this daemon runs.
    pub only_own: Option<super::Own>,
}

type Out = mpsc::Sender<Result<SubscribeResponse, Status>>;

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

struct Queued {
    event: Event,
    kind: Kind,
    bytes: usize,
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
}

/// The writing half of one stream and what it holds for the client.
struct Outbound {
    queue: VecDeque<Queued>,
    /// Count and bytes of the `Live` events in `queue`.
    live_count: usize,
    live_bytes: usize,
    /// A start group (gap, snapshot parts) has begun to leave and not ended.
    mid_start: bool,
    last_sent: Instant,
    filter: Filter,
    live: Option<broadcast::Receiver<Arc<Event>>>,
    pending: Option<Pending>,
    /// Highest seq this stream has accounted for (queued or filtered out).
    cursor: u64,
    buffer_events: usize,
    buffer_bytes: usize,
}

impl Outbound {
    fn push(&mut self, event: Event, kind: Kind) {
        let bytes = event.encoded_len();
        if kind == Kind::Live {
            self.live_count += 1;
            self.live_bytes += bytes;
        }
        self.queue.push_back(Queued { event, kind, bytes });
    }

    /// Queues a numbered event, or overflows.
    fn push_live(&mut self, event: Event) {
        let bytes = event.encoded_len();
        if self.live_count > 0
            && (self.live_count >= self.buffer_events
                || self.live_bytes + bytes > self.buffer_bytes)
        {
            tracing::info!(
                held = self.live_count,
                bytes = self.live_bytes,
                "subscriber too slow; resynchronising"
            );
            let lost_from = self.drop_queued(true).unwrap_or(event.seq);
            self.resync_after(lost_from.saturating_sub(1));
            return;
        }
        self.push(event, Kind::Live);
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
                first_lost = first_lost.or(Some(item.event.seq));
                self.live_count -= 1;
                self.live_bytes -= item.bytes;
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
            let Some(rx) = self.live.as_mut().filter(|_| self.queue.is_empty()) else {
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
    fn take_live(&mut self, event: &Event) {
        if event.seq <= self.cursor {
            return;
        }
        self.cursor = event.seq;
        if self.filter.admits(event) {
            self.push_live(Event::clone(event));
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
            self.push(
                Event {
                    seq: 0,
                    session_id: String::new(),
                    time,
                    payload: Some(Payload::Snapshot(part)),
                },
                Kind::Start,
            );
        }
    }
}

async fn next_live(
    rx: &mut Option<broadcast::Receiver<Arc<Event>>>,
) -> Result<Arc<Event>, broadcast::error::RecvError> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl Subscriber {
    /// Runs the stream until the client leaves or the daemon shuts down.
    pub async fn run<S>(self, mut inbound: S, out: Out)
    where
        S: Stream<Item = Result<SubscribeRequest, Status>> + Unpin,
    {
        let mut st = Outbound {
            queue: VecDeque::new(),
            live_count: 0,
            live_bytes: 0,
            mid_start: false,
            last_sent: Instant::now(),
            filter: Filter::default(),
            live: None,
            pending: None,
            cursor: 0,
            buffer_events: self.buffer_events.max(1),
            buffer_bytes: self.buffer_bytes.max(1),
        };
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
        loop {
            let heartbeat_at = st.last_sent + self.heartbeat;
            if heartbeat.deadline() != heartbeat_at {
                heartbeat.as_mut().reset(heartbeat_at);
            }
            let open = tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => {
                    // Told, not waited for: a client that does not read
                    // learns it from the stream's end.
                    let reconnect = Reconnect { reason: "the daemon is shutting down".into() };
                    let _ = out.try_send(Ok(SubscribeResponse { event: Some(local(Payload::Reconnect(reconnect))) }));
                    false
                }
                () = out.closed() => false,
                // What is pending is made only when the client can take
                // something and nothing is queued before it: Watches sent to
                // a stream that does not read replace each other for free.
                permit = out.reserve(), if !st.queue.is_empty() || st.pending.is_some() => match (permit, st.next_item(&self)) {
                    (Ok(permit), Some(item)) => {
                        if item.kind == Kind::Live {
                            st.live_count -= 1;
                            st.live_bytes -= item.bytes;
                        }
                        if item.kind == Kind::Start {
                            st.mid_start = match &item.event.payload {
                                Some(Payload::Snapshot(s)) => s.more,
                                Some(Payload::Gap(_)) => {
                                    self.bus.counters().gap_sent();
                                    true
                                }
                                _ => true,
                            };
                        }
                        permit.send(Ok(SubscribeResponse { event: Some(item.event) }));
                        st.last_sent = Instant::now();
                        true
                    }
                    (Ok(_), None) => true,
                    (Err(_), _) => false,
                },
                message = inbound.next(), if reading => match message {
                    Some(Ok(SubscribeRequest { message: Some(Message::Watch(watch)) })) => {
                        match crate::limits::watch(&watch).and_then(|()| Filter::check(&watch)) {
                            Err(err) => st.push(local(Payload::Error(err.to_stream_error(""))), Kind::Local),
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
                                    stepd_proto::v1::ErrorReason::LimitExceeded,
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
                            let _ = out.send(Err(crate::malformed::refusal(&status))).await;
                        }
                        false
                    }
                    None => {
                        reading = false;
                        true
                    }
                },
                Some(failure) = failures.recv() => {
                    st.push(failure, Kind::Local);
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
                    st.push(local(Payload::Heartbeat(HeartbeatEvent { last_seq })), Kind::Local);
                    // A heartbeat counts as sent once queued, so a stream
                    // that cannot take it does not queue another.
                    st.last_sent = Instant::now();
                    true
                }
            };
            if !open {
                return;
            }
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
                let resume = (watch.resume_after_seq > 0).then_some(watch.resume_after_seq);
                let (start, rx) = self
                    .bus
                    .subscribe(&st.filter, resume, &watch.resume_instance_id);
                st.live = Some(rx);
                match start {
                    Start::Snapshot(snapshot) => st.push_snapshot(*snapshot, self.part_bytes),
                    Start::Replay(missed) => {
                        st.cursor = watch.resume_after_seq;
                        for event in missed {
                            st.cursor = event.seq;
                            st.push_live(Event::clone(&event));
                            if st.live.is_none() {
                                // Overflowed: a resynchronisation follows.
                                break;
                            }
                        }
                    }
                    Start::Resync { gap, snapshot } => {
                        st.push(*gap, Kind::Start);
                        st.push_snapshot(*snapshot, self.part_bytes);
                    }
                }
            }
            Pending::Resync(after) => {
                let (gap, snapshot, rx) = self.bus.resync(&st.filter, after);
                // What the stream lost is what its gap spans.
                if let Some(Payload::Gap(g)) = &gap.payload {
                    self.bus
                        .counters()
                        .dropped((g.to_seq + 1).saturating_sub(g.from_seq));
                }
                st.live = Some(rx);
                st.push(gap, Kind::Start);
                st.push_snapshot(snapshot, self.part_bytes);
            }
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
    use stepd_proto::v1::{Notification, Snapshot};
    use tokio_stream::wrappers::ReceiverStream;

    use super::*;

    fn subscriber(bus: Arc<EventBus>, buffer_bytes: usize) -> Subscriber {
        Subscriber {
            bus,
            answer: Arc::new(|_, _| Box::pin(async { Ok(()) })),
            shutdown: CancellationToken::new(),
            heartbeat: Duration::from_secs(3600),
            client_name: "test".into(),
            buffer_events: 1000,
            buffer_bytes,
            part_bytes: 1 << 20,
            only_own: None,
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

    async fn next_event(rx: &mut mpsc::Receiver<Result<SubscribeResponse, Status>>) -> Event {
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("an event in time")
            .expect("the stream is open")
            .expect("not an error")
            .event
            .expect("an event")
    }

    async fn next(rx: &mut mpsc::Receiver<Result<SubscribeResponse, Status>>) -> Payload {
        next_event(rx).await.payload.expect("a payload")
    }

    /// Waits until the subscriber has taken every client message.
    async fn drained(tx: &mpsc::Sender<Result<SubscribeRequest, Status>>) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while tx.capacity() < tx.max_capacity() {
            assert!(Instant::now() < deadline, "the subscriber stopped reading");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn watches_a_client_does_not_read_replace_each_others_snapshots() {
        let bus = Arc::new(EventBus::new("i".into(), 1, 64, 64));
        let (in_tx, in_rx) = mpsc::channel(128);
        let (out, mut rx) = mpsc::channel(1);
        tokio::spawn(subscriber(bus.clone(), 1 << 20).run(ReceiverStream::new(in_rx), out));
        for _ in 0..100 {
            in_tx.send(watch()).await.unwrap();
        }
        drained(&in_tx).await;
        let last = note(&bus, 10);
        // The first answer was already on its way; of the 99 others only the
        // last is made, once the client reads, so it already holds the event.
        let Payload::Snapshot(Snapshot { seq: first, .. }) = next(&mut rx).await else {
            panic!("expected the first Watch's snapshot")
        };
        assert!(first < last);
        let Payload::Snapshot(Snapshot { seq, .. }) = next(&mut rx).await else {
            panic!("expected the last Watch's snapshot")
        };
        assert_eq!(seq, last);
        let after = note(&bus, 10);
        let Payload::Notification(_) = next(&mut rx).await else {
            panic!("expected the event after the snapshot")
        };
        assert!(after > seq);
        assert!(rx.try_recv().is_err(), "nothing more");
    }

    #[tokio::test]
    async fn a_flood_of_other_sessions_passes_a_narrow_watch_by_in_order() {
        let bus = Arc::new(EventBus::new("i".into(), 1, 4096, 64));
        let (in_tx, in_rx) = mpsc::channel(8);
        let (out, mut rx) = mpsc::channel(4);
        tokio::spawn(subscriber(bus.clone(), 1 << 20).run(ReceiverStream::new(in_rx), out));
        in_tx
            .send(Ok(SubscribeRequest {
                message: Some(Message::Watch(Watch {
                    session_ids: vec!["a".into()],
                    ..Default::default()
                })),
            }))
            .await
            .unwrap();
        let Payload::Snapshot(_) = next(&mut rx).await else {
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
            let event = next_event(&mut rx).await;
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
    async fn a_subscriber_over_its_bytes_gets_a_gap_then_a_snapshot() {
        let bus = Arc::new(EventBus::new("i".into(), 1, 4096, 64));
        let (in_tx, in_rx) = mpsc::channel(8);
        let (out, mut rx) = mpsc::channel(1);
        tokio::spawn(subscriber(bus.clone(), 10_000).run(ReceiverStream::new(in_rx), out));
        in_tx.send(watch()).await.unwrap();
        let Payload::Snapshot(snapshot) = next(&mut rx).await else {
            panic!("expected a snapshot")
        };
        // Ten 3 KB events: the first fills the channel, three fit 10 KB, the
        // fifth overflows and everything held is dropped.
        let seqs: Vec<u64> = (0..10).map(|_| note(&bus, 3_000)).collect();
        assert!(seqs[0] > snapshot.seq);
        let mut seen = Vec::new();
        let gap = loop {
            match next(&mut rx).await {
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
        let Payload::Snapshot(after) = next(&mut rx).await else {
            panic!("expected a snapshot after the gap")
        };
        assert_eq!(after.seq, gap.to_seq);
        let later = note(&bus, 10);
        let Payload::Notification(_) = next(&mut rx).await else {
            panic!("the stream goes on after the resync")
        };
        assert!(later > after.seq);
    }
}
