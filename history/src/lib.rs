//! Session history: every event a session publishes is recorded in the
//! store (`recorder.rs`), kept within the retention limits (`retention.rs`)
//! and read back a page at a time (`read.rs`, `HistoryService`); each
//! session's latest record is kept beside it (`records.rs`) for listing
//! the sessions that ended (`ended.rs`).

mod ended;
mod read;
mod recorder;
mod records;
mod retention;

#[cfg(test)]
mod tests;

use std::{
    sync::{Arc, atomic::AtomicU64},
    time::Duration,
};

pub use ended::EndedFilter;
pub use read::Page;
pub use recorder::recorded;

use stepd_core::events::EventBus;
use stepd_store::Store;

/// How long history is kept and how much of it.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Events older than this are dropped.
    pub max_age: Duration,
    /// When the history is larger, the oldest events are dropped.
    pub max_bytes: u64,
}

/// The daemon's session history.
pub struct History {
    /// What sessions exist (a live session's history may not be written yet).
    bus: Arc<EventBus>,
    store: Store,
    recorder: Option<Arc<recorder::Recorder>>,
}

impl History {
    /// Records the sessions' events on `bus` into `store` (unless
    /// `recording` is false) and keeps them within `retention`; with
    /// `own`, only the sessions it admits (a replica's own).
    pub fn start(
        bus: Arc<EventBus>,
        store: Store,
        recording: bool,
        retention: Retention,
        own: Option<stepd_core::events::Own>,
    ) -> Self {
        // The history's size, followed by the recorder and the retention.
        let bytes = Arc::new(AtomicU64::new(0));
        let recorder = recording
            .then(|| recorder::Recorder::start(bus.clone(), store.clone(), bytes.clone(), own));
        if recording {
            tokio::spawn(retention::watch(store.clone(), retention, bytes));
        }
        Self {
            bus,
            store,
            recorder,
        }
    }

    /// Waits (for at most `within`) until every event published so far is
    /// recorded: at shutdown, before the store closes.
    pub async fn flush(&self, within: Duration) {
        if let Some(recorder) = &self.recorder {
            recorder.flush(within).await;
        }
    }
}
