//! Keeps the history within `--history-max-age` and `--history-max-bytes`:
//! the oldest events go first, and each session's history records what was
//! dropped of it.
//!
//! The size is followed in memory (the recorder adds what it writes) so
//! that checking it costs nothing; it is read from the store again after
//! every drop and once a minute, which takes in what other replicas of a
//! shared database recorded.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use super::Retention;
use stepd_core::time::now_us;
use stepd_store::Store;

/// How often the size is compared with its limit.
const CHECK_SIZE: Duration = Duration::from_secs(1);
/// How often the age, and the size as stored, are read.
const READ_STORE: Duration = Duration::from_secs(60);

pub(super) async fn watch(store: Store, retention: Retention, bytes: Arc<AtomicU64>) {
    let mut read_at: Option<Instant> = None;
    loop {
        if store.is_closed() {
            return;
        }
        let due = read_at.is_none_or(|at| at.elapsed() >= READ_STORE);
        let over = bytes.load(Ordering::Relaxed) > retention.max_bytes;
        if due || over {
            match enforce(&store, retention, due).await {
                Ok(size) => bytes.store(size, Ordering::Relaxed),
                Err(err) => tracing::warn!(error = %err, "could not apply the history's retention"),
            }
            if due {
                read_at = Some(Instant::now());
            }
        }
        tokio::time::sleep(CHECK_SIZE).await;
    }
}

/// Drops what is past the limits (the age only when `age` is set); the
/// size of what is left.
async fn enforce(store: &Store, retention: Retention, age: bool) -> anyhow::Result<u64> {
    let now = now_us();
    if age {
        let max_age = i64::try_from(retention.max_age.as_micros()).unwrap_or(i64::MAX);
        let cut = now.saturating_sub(max_age);
        if store
            .oldest_history()
            .await?
            .is_some_and(|oldest| oldest <= cut)
        {
            store
                .drop_history_through(cut, "older than --history-max-age", now)
                .await?;
        }
    }
    let bytes = store.history_bytes().await?;
    if bytes <= retention.max_bytes {
        return Ok(bytes);
    }
    if let Some(cut) = store.history_cut_for(bytes - retention.max_bytes).await? {
        store
            .drop_history_through(cut, "over --history-max-bytes", now)
            .await?;
    }
    Ok(store.history_bytes().await?)
}
