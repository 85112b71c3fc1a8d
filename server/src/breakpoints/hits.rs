//! Breakpoint hits on their way to the store and to subscribers. A hit is on
//! the path of every pause it causes; counting it is a map update, and the
//! counts reach the database, and the event stream as `HIT` updates, in
//! batches: a hot loop whose hits are auto-continued would otherwise write a
//! row and publish an event per hit.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use stepd_proto::v1::{BreakpointChange, BreakpointUpdated, event::Payload};
use tokio::sync::Notify;

use crate::{events::EventBus, store::Store};

/// How long counted hits may wait before they are written and published.
const FLUSH_DELAY: Duration = Duration::from_millis(200);

/// Hits counted in memory, not yet in the store or not yet published.
pub struct HitWriter {
    store: Store,
    bus: Arc<EventBus>,
    /// The breakpoints' change order (see `Breakpoints::write`): a batch is
    /// published in it, so a HIT never overtakes a removal.
    order: Arc<tokio::sync::Mutex<()>>,
    /// Breakpoint row → hits since the last write.
    unwritten: Mutex<HashMap<i64, u64>>,
    /// Breakpoint id → hits the event state does not know yet.
    unpublished: Mutex<HashMap<String, u64>>,
    counted: Notify,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl HitWriter {
    /// A writer and its background task, which lives as long as the runtime.
    pub fn start(
        store: Store,
        bus: Arc<EventBus>,
        order: Arc<tokio::sync::Mutex<()>>,
    ) -> Arc<Self> {
        let writer = Arc::new(Self {
            store,
            bus,
            order,
            unwritten: Mutex::default(),
            unpublished: Mutex::default(),
            counted: Notify::new(),
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
    /// at shutdown).
    pub async fn flush(&self) {
        {
            let _order = self.order.lock().await;
            let batch = std::mem::take(&mut *lock(&self.unpublished));
            for (id, hits) in batch {
                // A removed breakpoint has nothing left to announce.
                let Some(mut breakpoint) = self.bus.with_view(|v| v.breakpoint(&id)) else {
                    continue;
                };
                breakpoint.hit_count += hits;
                self.bus.publish(
                    "",
                    Payload::BreakpointUpdated(BreakpointUpdated {
                        change: BreakpointChange::Hit.into(),
                        breakpoint: Some(breakpoint),
                        status: None,
                    }),
                );
            }
        }
        let batch = std::mem::take(&mut *lock(&self.unwritten));
        for (row, hits) in batch {
            if let Err(err) = self.store.add_hits(row, hits).await {
                tracing::warn!(%err, breakpoint = row, hits, "could not store breakpoint hits");
            }
        }
    }

    async fn run(self: Arc<Self>) {
        loop {
            self.counted.notified().await;
            tokio::time::sleep(FLUSH_DELAY).await;
            self.flush().await;
        }
    }
}
