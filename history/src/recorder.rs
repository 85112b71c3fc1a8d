//! The recorder: a subscriber of the event bus like any other, which hands
//! each batch of session events to the store's writer. It never slows a
//! publisher: when it falls behind the bus's live buffer it resumes from the
//! rings, and what the rings no longer hold is recorded as a `gap` in the
//! history of every session that was live. Nor does it hold memory for a
//! slow store: while it waits for the store it lets go of its place in the
//! live buffer once that place holds `LIVE_LAG_BYTES`.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use prost::Message as _;
use stepd_proto::v1::{Event, Watch, event::Payload};
use tokio::{
    sync::{Semaphore, broadcast, watch},
    time::Instant,
};

use stepd_core::{
    events::{EventBus, Filter, Own, Published, Start, channel_of},
    time::us_from_timestamp,
};
use stepd_store::{RecordedEvent, Store};

/// The most events one write takes: a second of a flood of 50,000 a second.
const BATCH: usize = 64 * 1024;
/// The most bytes of events one write takes: a burst of large events is
/// cut into writes of this size, so what waits for the store is bounded in
/// bytes as well as in events.
const BATCH_BYTES: usize = 8 << 20;
/// How long the recorder lets events gather after the first before it
/// writes them. One transaction for a step's burst keeps the disk's syncs
/// off the next step's way.
pub(super) const LINGER: Duration = Duration::from_millis(200);
/// A batch this large when `LINGER` is up is a flood of reports, and goes
/// on gathering until `FLOOD_LINGER`: with a thousand sessions reporting,
/// each commit writes a page of the history's index per session however
/// few rows each got, so a second's transaction costs SQLite a quarter
/// less per row than a fifth of a second's (docs/benchmarks.md).
pub(super) const FLOOD: usize = 4 * 1024;
/// How long a flood's batch gathers, from its first event.
pub(super) const FLOOD_LINGER: Duration = Duration::from_secs(1);
/// While lingering the recorder takes what has arrived this often, so the
/// live buffer (4,096 events by default) never overflows meanwhile: 20 ms
/// is 1,000 events at 50,000 a second.
pub(super) const DRAIN: Duration = Duration::from_millis(20);
/// Events handed to the store and not yet written. Past this the recorder
/// waits, lags the live buffer and takes up again from the rings, so a
/// store slower than the events costs a bounded amount of memory: two of
/// a flood's batches.
const IN_FLIGHT: usize = 2 * BATCH;
/// The same bound in KiB of encoded events: two batches of `BATCH_BYTES`.
const IN_FLIGHT_KIB: usize = 2 * (BATCH_BYTES >> 10);
/// How many bytes of events the live buffer may keep for the recorder
/// while it waits for the store. The buffer is bounded only by count (4,096
/// events), and a receiver that does not read keeps every event after it:
/// 4,096 large events are hundreds of megabytes. Past this the recorder
/// takes up again from the rings, whose memory is bounded on its own
/// (`--ring-bytes-total`, decision 199).
const LIVE_LAG_BYTES: u64 = 16 << 20;

pub(super) struct Recorder {
    bus: Arc<EventBus>,
    progress: Arc<Progress>,
}

/// What the recorder's loop shares with its handle.
struct Progress {
    /// Sends the highest seq the store has made durable (or given up on).
    done: watch::Sender<u64>,
    /// Set by `flush`: from then on a batch is written as soon as it is
    /// taken, for a flood's second of gathering would spend half of the
    /// daemon's time to flush at shutdown.
    hurry: AtomicBool,
}

impl Recorder {
    /// Starts recording; `bytes` grows by what is written. With `own`,
    /// only the sessions it admits are recorded: another replica records
    /// the sessions it runs.
    pub fn start(
        bus: Arc<EventBus>,
        store: Store,
        bytes: Arc<AtomicU64>,
        own: Option<Own>,
    ) -> Arc<Self> {
        // Where recording starts: a lag before the task first runs is
        // taken up from here. (An event published in between is recorded
        // once: a second copy of a row is ignored.)
        let from = bus.last_seq();
        let (done, _) = watch::channel(from);
        let filter = Filter::from_watch(&Watch::default());
        let (_, live) = bus.subscribe(&filter, None, "");
        let filter = match own {
            Some(own) => filter.only_own(own),
            None => filter,
        };
        let progress = Arc::new(Progress {
            done,
            hurry: AtomicBool::new(false),
        });
        tokio::spawn(record(
            bus.clone(),
            store,
            live,
            from,
            progress.clone(),
            bytes,
            filter,
        ));
        Arc::new(Self { bus, progress })
    }

    pub async fn flush(&self, within: Duration) {
        self.progress.hurry.store(true, Ordering::Relaxed);
        let target = self.bus.last_seq();
        let mut recorded = self.progress.done.subscribe();
        let _ = tokio::time::timeout(within, recorded.wait_for(|seq| *seq >= target)).await;
    }
}

/// The recorder's loop, until the bus is gone.
async fn record(
    bus: Arc<EventBus>,
    store: Store,
    live: broadcast::Receiver<Arc<Published>>,
    mut last: u64,
    progress: Arc<Progress>,
    bytes: Arc<AtomicU64>,
    own: Filter,
) {
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let in_flight_kib = Arc::new(Semaphore::new(IN_FLIGHT_KIB));
    // Whether the last batch was cut at BATCH: then more are already
    // waiting, and lingering would only let the live buffer overtake us.
    let mut behind = false;
    // The live receiver; none while the recorder has let go of its place.
    let mut live = Some(live);
    // The offset of the last event taken from `live`.
    let mut taken = bus.published_bytes();
    loop {
        let mut batch = Vec::new();
        let mut batch_bytes = 0;
        let mut lagged = false;
        match live.as_mut() {
            // Let go of while waiting for the store: take up from the rings.
            None => lagged = true,
            Some(rx) => match rx.recv().await {
                Ok(event) => {
                    batch_bytes += event.encoded_len();
                    taken = event.offset();
                    batch.push(event);
                }
                Err(broadcast::error::RecvError::Lagged(_)) => lagged = true,
                Err(broadcast::error::RecvError::Closed) => return,
            },
        }
        let first = Instant::now();
        let mut linger_until = first + if behind { Duration::ZERO } else { LINGER };
        loop {
            while let Some(rx) = live.as_mut().filter(|_| !lagged)
                && batch.len() < BATCH
                && batch_bytes < BATCH_BYTES
            {
                match rx.try_recv() {
                    Ok(event) => {
                        batch_bytes += event.encoded_len();
                        taken = event.offset();
                        batch.push(event);
                    }
                    Err(broadcast::error::TryRecvError::Lagged(_)) => lagged = true,
                    Err(_) => break,
                }
            }
            let now = Instant::now();
            if now >= linger_until && !behind && batch.len() >= FLOOD {
                linger_until = first + FLOOD_LINGER;
            }
            let hurry = progress.hurry.load(Ordering::Relaxed);
            let full = batch.len() >= BATCH || batch_bytes >= BATCH_BYTES;
            if lagged || full || now >= linger_until || hurry {
                break;
            }
            tokio::time::sleep_until((now + DRAIN).min(linger_until)).await;
        }
        behind = batch.len() >= BATCH || batch_bytes >= BATCH_BYTES;
        if lagged {
            let through = batch.last().map_or(last, |e| e.seq);
            live = Some(take_up(&bus, through, &mut batch));
            // What the rings give back is not in the live buffer.
            taken = bus.published_bytes();
        }
        let Some(newest) = batch.iter().map(|e| e.seq).max() else {
            // Nothing to record (a gap with no live session): recorded up
            // to where the bus is.
            last = last.max(bus.last_seq());
            progress.done.send_replace(last);
            continue;
        };
        last = last.max(newest);
        let (rows, lives) = rows_of(&batch, &own).await;
        if rows.is_empty() {
            progress.done.send_replace(last);
            continue;
        }
        let size: usize = rows.iter().map(|r| r.event.len()).sum();
        let permits = async {
            // A batch that took up a lag from the rings may be larger than
            // all the permits; it takes them all.
            let events = u32::try_from(rows.len().min(IN_FLIGHT)).unwrap_or(u32::MAX);
            let kib = u32::try_from(size.div_ceil(1024).min(IN_FLIGHT_KIB)).unwrap_or(u32::MAX);
            let events = in_flight.clone().acquire_many_owned(events).await;
            let kib = in_flight_kib.clone().acquire_many_owned(kib).await;
            (events, kib)
        };
        let (Ok(permit), Ok(kib_permit)) = letting_go(permits, &bus, &mut live, taken).await else {
            return;
        };
        let queued = store.queue_events(rows).await;
        // After the events, in the writer's order: a session listed as
        // ended has its history written.
        let records = lives.records(&bus);
        let records = if records.is_empty() {
            None
        } else {
            Some(store.queue_session_records(records).await)
        };
        let (bytes, progress) = (bytes.clone(), progress.clone());
        tokio::spawn(async move {
            let _permits = (permit, kib_permit);
            written(queued, records, size, &bytes).await;
            progress.done.send_modify(|seq| *seq = (*seq).max(newest));
        });
    }
}

/// Waits for a batch's writes and counts or logs what became of them.
async fn written(
    queued: stepd_store::Queued,
    records: Option<stepd_store::Queued>,
    size: usize,
    bytes: &AtomicU64,
) {
    if let Some(records) = records
        && let Err(err) = records.done().await
        && !err.source.is_store_down()
    {
        tracing::warn!(error = %err, "session records not written");
    }
    match queued.done().await {
        Ok(_) => {
            bytes.fetch_add(size as u64, Ordering::Relaxed);
        }
        // An outage is logged once, by the store, not per batch.
        Err(err) if err.source.is_store_down() => {
            tracing::debug!(error = %err, "session events not recorded in the history")
        }
        Err(err) => {
            tracing::warn!(error = %err, "session events not recorded in the history")
        }
    }
}

/// Waits for `permits` (the store's room for a batch); meanwhile, once the
/// live buffer holds more than `LIVE_LAG_BYTES` past what was taken from
/// it, lets go of the live receiver so the buffer does not keep the burst.
async fn letting_go<T>(
    permits: impl std::future::Future<Output = T>,
    bus: &EventBus,
    live: &mut Option<broadcast::Receiver<Arc<Published>>>,
    taken: u64,
) -> T {
    tokio::pin!(permits);
    loop {
        tokio::select! {
            permits = &mut permits => return permits,
            () = tokio::time::sleep(DRAIN), if live.is_some() => {
                if bus.published_bytes().saturating_sub(taken) > LIVE_LAG_BYTES {
                    *live = None;
                }
            }
        }
    }
}

/// The rows of a batch's events that belong to this replica's history, and
/// the sessions they are about.
async fn rows_of(
    batch: &[Arc<Published>],
    own: &Filter,
) -> (Vec<RecordedEvent>, super::records::Lives) {
    let mut rows = Vec::with_capacity(batch.len());
    let mut lives = super::records::Lives::default();
    for event in batch {
        if own.admits(event)
            && let Some(row) = recorded(event)
        {
            lives.note(event);
            rows.push(row);
        }
        // Under a flood a batch is a second of events: encoded in one go
        // they held a worker for milliseconds, and every task queued behind
        // it (a hold's round trip among them) waited as long.
        tokio::task::consume_budget().await;
    }
    (rows, lives)
}

/// Takes up again after `through`, the last event seen, from the rings:
/// what was missed joins `batch`, and the new live receiver follows.
fn take_up(
    bus: &EventBus,
    through: u64,
    batch: &mut Vec<Arc<Published>>,
) -> broadcast::Receiver<Arc<Published>> {
    let filter = Filter::from_watch(&Watch::default());
    let (start, fresh) = bus.subscribe(&filter, Some(through), bus.instance_id());
    match start {
        Start::Replay(missed) => batch.extend(missed),
        Start::Resync { gap, .. } => batch.extend(gaps(bus, &gap)),
        Start::Snapshot(_) => {}
    }
    fresh
}

/// The row of an event that belongs to a session's history.
pub fn recorded(event: &Event) -> Option<RecordedEvent> {
    if event.session_id.is_empty() {
        return None;
    }
    let payload = event.payload.as_ref()?;
    let channel = match payload {
        Payload::Gap(_) => 0,
        other => channel_of(other)? as i32,
    };
    Some(RecordedEvent {
        session_id: event.session_id.clone(),
        seq: event.seq,
        channel,
        time_us: event.time.as_ref().map_or(0, us_from_timestamp),
        event: event.encode_to_vec(),
    })
}

/// A gap the recorder could not fill, as an event of each live session,
/// numbered as the last event lost so that it stands where the loss ends.
fn gaps(bus: &EventBus, gap: &Event) -> Vec<Arc<Published>> {
    let through = match &gap.payload {
        Some(Payload::Gap(g)) => g.to_seq,
        _ => return Vec::new(),
    };
    bus.with_view(|v| v.sessions(false))
        .into_iter()
        .map(|session| {
            Arc::new(Published::new(Event {
                seq: through,
                session_id: session.id,
                ..gap.clone()
            }))
        })
        .collect()
}
