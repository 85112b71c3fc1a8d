//! Breakpoint hits on their way to the store and to subscribers. A hit is on
//! the path of every pause it causes; counting it is a map update, and the
//! counts reach the database, and the event stream as `HIT` updates, in
//! batches: a hot loop whose hits are auto-continued would otherwise write a
//! row and publish an event per hit.
//!
//! A batch the store refuses (a full disk) is kept and written again later
//! with the hits counted since, so counts are late rather than lost; the
//! failure is logged at once and then at most every `WARN_EVERY` while it
//! lasts.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use stepd_proto::v1::{BreakpointChange, BreakpointUpdated, event::Payload};
use tokio::sync::Notify;

use super::{HitsRefused, Store};
use crate::events::EventBus;

/// How long counted hits may wait before they are written and published.
const FLUSH_DELAY: Duration = Duration::from_millis(200);

/// The first wait before hits the store refused are written again; it
/// doubles up to `RETRY_MAX` while the store keeps refusing.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// While writes of hits keep failing, a warning at most this often.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Writes of hits failing since `since`.
struct Failing {
    since: Instant,
    attempts: u64,
    warned_at: Instant,
    /// Failed attempts since the last warning.
    unwarned: u64,
}

/// Hits counted in memory, not yet in the store or not yet published.
pub struct HitWriter {
    store: Store,
    bus: Arc<EventBus>,
    /// The breakpoints' change order (see `Breakpoints::write`): a batch is
    /// published in it, so a HIT never overtakes a removal.
    order: Arc<super::order::ChangeOrder>,
    /// Breakpoint row → hits since the last write.
    unwritten: Mutex<HashMap<i64, u64>>,
    /// Breakpoint id → hits the event state does not know yet.
    unpublished: Mutex<HashMap<String, u64>>,
    counted: Notify,
    /// Set while the store refuses hits.
    failing: Mutex<Option<Failing>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl HitWriter {
    /// A writer and its background task, which lives as long as the runtime.
    pub fn start(
        store: Store,
        bus: Arc<EventBus>,
        order: Arc<super::order::ChangeOrder>,
    ) -> Arc<Self> {
        let writer = Arc::new(Self {
            store,
            bus,
            order,
            unwritten: Mutex::default(),
            unpublished: Mutex::default(),
            counted: Notify::new(),
            failing: Mutex::default(),
        });
        tokio::spawn(writer.clone().run());
        writer
    }

    /// Counts one hit of breakpoint `id` (store row `row`). The caller holds
    /// the change order.
    pub fn count(&self, row: i64, id: &str) {
        *lock(&self.unwritten).entry(row).or_default() += 1;
        *lock(&self.unpublished).entry(id.to_owned()).or_default() += 1;
        self.counted.notify_one();
    }

    /// Hits of `id` the event state does not know yet.
    pub fn unpublished(&self, id: &str) -> u64 {
        lock(&self.unpublished).get(id).copied().unwrap_or(0)
    }

    /// Takes the unpublished hits of `id`: the caller is about to publish the
    /// breakpoint with them included.
    pub fn take_unpublished(&self, id: &str) -> u64 {
        lock(&self.unpublished).remove(id).unwrap_or(0)
    }

    /// Publishes and writes every counted hit now (the timer, and the daemon
    /// at shutdown); false when the store refused the hits, which are kept
    /// for the next write.
    pub async fn flush(&self) -> bool {
        {
            let _order = self.order.hold().await;
            let batch = std::mem::take(&mut *lock(&self.unpublished));
            for (id, hits) in batch {
                // A removed breakpoint has nothing left to announce.
                let Some(mut breakpoint) = self.bus.with_view(|v| v.breakpoint(&id)) else {
                    continue;
                };
                breakpoint.hit_count += hits;
                self.bus.publish(
                    "",
                    Payload::BreakpointUpdated(Box::new(BreakpointUpdated {
                        change: BreakpointChange::Hit.into(),
                        breakpoint: Some(breakpoint),
                        status: None,
                    })),
                );
            }
        }
        let batch: Vec<(i64, u64)> = lock(&self.unwritten).drain().collect();
        if batch.is_empty() {
            return true;
        }
        match self.store.add_hits(&batch).await {
            Ok(()) => {
                self.recovered();
                true
            }
            Err(err) => {
                let mut unwritten = lock(&self.unwritten);
                for (row, hits) in batch {
                    *unwritten.entry(row).or_default() += hits;
                }
                let waiting: u64 = unwritten.values().sum();
                drop(unwritten);
                self.failed(&err, waiting);
                false
            }
        }
    }

    /// Logs a refused batch: the first at once, then at most every
    /// `WARN_EVERY`.
    fn failed(&self, err: &HitsRefused, waiting: u64) {
        let now = Instant::now();
        let mut failing = lock(&self.failing);
        let state = failing.get_or_insert(Failing {
            since: now,
            attempts: 0,
            warned_at: now,
            unwarned: 0,
        });
        state.attempts += 1;
        state.unwarned += 1;
        if state.attempts == 1 || now.duration_since(state.warned_at) >= WARN_EVERY {
            tracing::warn!(
                store = %err.place,
                error = %err.error,
                hits = waiting,
                attempts = state.attempts,
                failed_since_last_warning = state.unwarned,
                failing_for_s = now.duration_since(state.since).as_secs(),
                "could not store breakpoint hits; they are kept and written again later"
            );
            state.warned_at = now;
            state.unwarned = 0;
        }
    }

    fn recovered(&self) {
        if let Some(state) = lock(&self.failing).take() {
            tracing::info!(
                store = %self.store.place(),
                attempts = state.attempts,
                failing_for_s = state.since.elapsed().as_secs(),
                "breakpoint hits stored again"
            );
        }
    }

    /// Hits not in the store yet (kept after a refused write, or counted
    /// since the last one).
    pub fn unwritten(&self) -> u64 {
        lock(&self.unwritten).values().sum()
    }

    async fn run(self: Arc<Self>) {
        let mut retry: Option<Duration> = None;
        loop {
            match retry {
                None => self.counted.notified().await,
                // Refused hits are written again after a while even when no
                // new hit comes.
                Some(wait) => tokio::time::sleep(wait).await,
            }
            tokio::time::sleep(FLUSH_DELAY).await;
            retry = if self.flush().await {
                None
            } else {
                Some(retry.map_or(RETRY_FIRST, |wait| (wait * 2).min(RETRY_MAX)))
            };
        }
    }
}
