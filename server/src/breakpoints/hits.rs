//! Breakpoint hits on their way to the store. A hit is on the path of every
//! pause it causes; counting it is a map update, and the counts reach the
//! database in batches, so no hit waits for (or competes for a core with) a
//! write of its own.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::sync::Notify;

use crate::store::Store;

/// How long counted hits may wait before they are written.
const FLUSH_DELAY: Duration = Duration::from_millis(200);

/// Hits counted in memory, not yet in the store.
pub struct HitWriter {
    store: Store,
    /// Breakpoint row → hits since the last write.
    pending: Mutex<HashMap<i64, u64>>,
    counted: Notify,
}

impl HitWriter {
    /// A writer and its background task, which lives as long as the runtime.
    pub fn start(store: Store) -> Arc<Self> {
        let writer = Arc::new(Self {
            store,
            pending: Mutex::default(),
            counted: Notify::new(),
        });
        tokio::spawn(writer.clone().run());
        writer
    }

    /// Counts one hit of breakpoint `row`.
    pub fn count(&self, row: i64) {
        *self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(row)
            .or_default() += 1;
        self.counted.notify_one();
    }

    /// Writes every counted hit now (the timer, and the daemon at shutdown).
    pub async fn flush(&self) {
        let batch = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
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
