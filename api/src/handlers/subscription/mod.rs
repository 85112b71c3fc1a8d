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

mod outbound;
#[cfg(test)]
mod tests;

use outbound::{Kind, Outbound, Overrun, Part, Pending};
use stepd_core::{
    error::{ApiError, ApiResult},
    events::{CatchUp, EventBus, Filter, Published, Start, StreamMemory, Wire},
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
                        on_watch(st, watch, &mut client_name);
                        true
                    }
                    Some(Ok(SubscribeRequest { message: Some(Message::DebugInput(input)) })) => {
                        self.on_debug_input(input, &client_name, &in_flight, &failures_tx);
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
                    reconnect(&memory, out);
                }
                return;
            }
            if closing
                && st.queue.is_empty()
                && st.pending.is_none()
                && st.live.as_ref().is_none_or(broadcast::Receiver::is_empty)
            {
                reconnect(&memory, out);
                return;
            }
            memory.daemon().enforce();
        }
    }

    /// Answers a debug input beside the stream (an EVAL may wait on the
    /// program); a failure comes back through `failures` as an `error` event.
    fn on_debug_input(
        &self,
        mut input: DebugInput,
        client_name: &str,
        in_flight: &Arc<tokio::sync::Semaphore>,
        failures: &mpsc::UnboundedSender<Event>,
    ) {
        let key = input.key.clone();
        // The answer is recorded with the client's own name: the input's,
        // else the stream's.
        if input.client_name.is_empty() {
            input.client_name = stepd_core::error::clip(client_name);
        }
        let by = input.client_name.clone();
        let failures = failures.clone();
        match in_flight.clone().try_acquire_owned() {
            Ok(permit) => {
                let answering = (self.answer)(input, by);
                tokio::spawn(async move {
                    if let Err(err) = answering.await {
                        let _ = failures.send(local(Payload::Error(err.to_stream_error(&key))));
                    }
                    drop(permit);
                });
            }
            Err(_) => {
                let err = ApiError::new(
                    ErrorReason::LimitExceeded,
                    format!(
                        "{INPUTS_IN_FLIGHT} debug inputs of this stream are still being answered"
                    ),
                )
                .with("limit", "inputs_in_flight")
                .with("max", INPUTS_IN_FLIGHT.to_string());
                let _ = failures.send(local(Payload::Error(err.to_stream_error(&key))));
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

/// A Watch: refused with an `error` event when it is malformed, else the
/// answer to an earlier Watch that has not started to leave is replaced by
/// this one's.
fn on_watch(st: &mut Outbound, watch: Watch, client_name: &mut String) {
    match stepd_core::limits::watch(&watch).and_then(|()| Filter::check(&watch)) {
        Err(err) => st.push_own(
            &local(Payload::Error(err.to_stream_error(""))),
            Kind::Local,
            Part::Other,
        ),
        Ok(()) => {
            if !watch.client_name.is_empty() {
                client_name.clone_from(&watch.client_name);
            }
            st.drop_queued(false);
            st.live = None;
            st.pending = Some(Pending::Watch(watch));
        }
    }
}

/// Tells the client the daemon is shutting down, past every bound.
fn reconnect(memory: &Arc<StreamMemory>, out: &Out) {
    let reconnect = Reconnect {
        reason: "the daemon is shutting down".into(),
    };
    let wire = Wire::encode(&local(Payload::Reconnect(reconnect)), memory.daemon());
    let _ = out.send(Ok(memory.hand(Arc::new(wire))));
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
