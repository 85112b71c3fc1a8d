//! Breakpoint changes other replicas of a shared database made
//! (`ChangeFeed`), applied here as if made locally: the event state
//! takes them and every session and subscriber of this replica sees a
//! `breakpoint_updated`, in the change order of local changes.
//!
//! Hit counts cross as the hits each replica adds (its batches, `hits.rs`),
//! so every replica's count is the cluster's, at most one batch late; a
//! breakpoint whose `max_hits` is spent anywhere is spent everywhere.

use std::{collections::HashSet, sync::Arc, time::Duration};

use stepd_proto::v1::{Breakpoint, BreakpointChange};

use super::{Change, ChangeFeed, Core, StoredBreakpoint, order::ChangeOrder};
use crate::error::ApiResult;

/// How long to wait before reading the database again when it refused.
const RETRY: Duration = Duration::from_millis(500);

/// Applies other replicas' changes until the store closes.
pub(super) async fn follow(
    core: Arc<Core>,
    order: Arc<ChangeOrder>,
    mut changes: Box<dyn ChangeFeed>,
) {
    while let Some(change) = changes.next().await {
        let _held = order.hold().await;
        let applied = match change {
            Change::Changed(row) => match core.store.get(row).await {
                Ok(Some(stored)) => {
                    core.take(&stored);
                    Ok(())
                }
                // Removed since: its removal is announced next.
                Ok(None) => Ok(()),
                Err(err) => Err(err),
            },
            Change::Removed(row) => {
                core.forget(&format!("bp-{row}"));
                Ok(())
            }
            Change::Hits { id, added } => {
                core.add_hits(&format!("bp-{id}"), added);
                Ok(())
            }
            Change::Lost => resync(&core).await,
        };
        if let Err(err) = applied {
            tracing::warn!(error = %err, "could not read a breakpoint another replica changed; reading them all again");
            while let Err(err) = resync(&core).await {
                if core.store.is_closed() {
                    return;
                }
                tracing::debug!(error = %err, "breakpoints not read again yet");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// Brings the event state to the database's breakpoints, after
/// announcements may have been missed.
async fn resync(core: &Core) -> ApiResult<()> {
    let stored = core.store.list().await?;
    let known = core.bus.with_view(|v| v.breakpoints());
    let mut present = HashSet::new();
    for row in &stored {
        let id = format!("bp-{}", row.id);
        let current = known.iter().find(|b| b.id == id);
        if current.is_none_or(|b| differs(b, row)) {
            core.take(row);
        }
        present.insert(id);
    }
    for gone in known.iter().filter(|b| !present.contains(&b.id)) {
        core.forget(&gone.id);
    }
    Ok(())
}

/// Whether the event state's breakpoint is behind the stored one.
fn differs(known: &Breakpoint, stored: &StoredBreakpoint) -> bool {
    known.spec.as_ref() != Some(&stored.spec)
        || known.updated_at != Some(crate::time::timestamp_from_us(stored.updated_at_us))
        || known.hit_count < stored.hit_count
}

impl Core {
    /// Publishes a breakpoint another replica added or changed.
    fn take(&self, stored: &StoredBreakpoint) {
        let id = format!("bp-{}", stored.id);
        let change = if self.bus.with_view(|v| v.breakpoint(&id)).is_some() {
            BreakpointChange::Updated
        } else {
            BreakpointChange::Added
        };
        let breakpoint = self.with_counted_hits(stored);
        let _ = self.announce(Ok((change, breakpoint)));
    }

    /// Publishes the removal of a breakpoint another replica removed.
    fn forget(&self, id: &str) {
        if let Some(breakpoint) = self.bus.with_view(|v| v.breakpoint(id)) {
            self.hits.take_unpublished(id);
            self.publish(BreakpointChange::Removed, breakpoint);
        }
    }

    /// Publishes hits another replica counted.
    fn add_hits(&self, id: &str, added: u64) {
        let Some(mut breakpoint) = self.bus.with_view(|v| v.breakpoint(id)) else {
            return;
        };
        breakpoint.hit_count += added;
        let max_hits = breakpoint.spec.as_ref().map_or(0, |s| s.max_hits);
        if max_hits > 0 && breakpoint.hit_count + self.hits.unpublished(id) >= u64::from(max_hits) {
            breakpoint.spent = true;
        }
        self.publish(BreakpointChange::Hit, breakpoint);
    }
}
