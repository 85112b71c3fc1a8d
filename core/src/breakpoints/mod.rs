//! Breakpoints: validation, persistence and change events. Breakpoints are
//! project state owned by the daemon; sessions apply them by label selector.

mod baggage;
pub mod condition;
mod expiry;
mod hit_condition;
mod hits;
pub mod log_message;
mod order;
mod replicas;
mod selector;
mod storage;
pub mod validate;
pub mod verdict;

use std::{collections::HashMap, sync::Arc};

use prost_types::FieldMask;
use stepd_proto::v1::{
    Breakpoint, BreakpointChange, BreakpointSpec, BreakpointUpdated, ErrorReason, event::Payload,
};

pub use crate::glob::Glob;
pub use hit_condition::HitCondition;
pub use selector::LabelSelector;
pub use storage::{
    BreakpointStore, Change, ChangeFeed, HitsRefused, StoreFuture, StoredBreakpoint,
};
pub use verdict::{Action, Known, Verdict};

use crate::{
    error::{ApiError, ApiResult},
    events::EventBus,
    time::{now_us, timestamp_from_us, us_from_timestamp},
    within::Within,
};

/// The store as the breakpoints hold it.
pub type Store = Arc<dyn BreakpointStore>;

/// The spec fields an update mask may name.
const MASK_PATHS: &[&str] = &[
    "source",
    "function",
    "exception",
    "probe",
    "enabled",
    "condition",
    "hit_condition",
    "label_selector",
    "expires_at",
    "max_hits",
    "action",
    "log_message",
    "hold_limit",
];

/// Breakpoint operations: every change is stored, then published — and
/// published only once the store has made it durable; a change the store
/// refuses leaves memory and the event stream as they were.
pub struct Breakpoints {
    core: Arc<Core>,
    /// Keeps the event order the store's order (`order.rs`).
    order: Arc<order::ChangeOrder>,
}

/// What a change touches, shared with the task each change runs on.
struct Core {
    store: Store,
    bus: Arc<EventBus>,
    /// Hits counted, on their way to the store.
    hits: Arc<hits::HitWriter>,
    /// Wakes the expiry watch when a breakpoint with an expiry is added or
    /// changed.
    expiries: Arc<tokio::sync::Notify>,
}

impl Breakpoints {
    /// Loads the stored breakpoints into the event bus's state.
    /// On a shared database, the changes of other replicas are followed
    /// from before the load, so that none falls between.
    pub async fn load(store: Store, bus: Arc<EventBus>) -> anyhow::Result<Self> {
        let changes = store.changes().await?;
        let stored = store.list().await?;
        bus.seed_breakpoints(stored.iter().map(to_proto).collect());
        let expiries = Arc::new(tokio::sync::Notify::new());
        expiry::watch(bus.clone(), expiries.clone());
        let order = order::ChangeOrder::new();
        let core = Arc::new(Core {
            expiries,
            hits: hits::HitWriter::start(store.clone(), bus.clone(), order.clone()),
            store,
            bus,
        });
        if let Some(changes) = changes {
            tokio::spawn(replicas::follow(core.clone(), order.clone(), changes));
        }
        Ok(Self { core, order })
    }

    /// Runs a change that reads what it changes (an update, a removal) —
    /// read, store, publish — holding the change order throughout, on a
    /// task of its own: once the store has a change the event stream gets
    /// it too, even when the caller has gone away (a cancelled request).
    /// A caller that goes away before the write's commit began takes the
    /// write with it (`within`).
    async fn change<F, Fut>(&self, within: &Within, change: F) -> ApiResult<Breakpoint>
    where
        F: FnOnce(Arc<Core>) -> Fut,
        Fut: Future<Output = ApiResult<(BreakpointChange, Breakpoint)>> + Send + 'static,
    {
        let _waiting = within.waiting();
        let order = self.order.clone();
        let core = self.core.clone();
        let run = change(self.core.clone());
        tokio::spawn(async move {
            let held = order.hold().await;
            let ticket = order.ticket(&held);
            let changed = run.await;
            let published = ticket.in_turn(|| core.announce(changed)).await;
            drop(held);
            published
        })
        .await
        .unwrap_or_else(|err| Err(ApiError::internal(format!("breakpoint change: {err}"))))
    }

    /// `ListBreakpoints`: every breakpoint in creation order, or, when
    /// `for_labels` is not empty, those whose selector matches them. Empty
    /// means "no filter" here; a session's own labels go to `applying_to`,
    /// where empty labels are labels like any other.
    pub async fn list(&self, for_labels: &HashMap<String, String>) -> ApiResult<Vec<Breakpoint>> {
        Ok(self.listed(|spec| {
            for_labels.is_empty() || verdict::applies_to(&spec.label_selector, for_labels)
        }))
    }

    /// The breakpoints that apply to a session or probe with `labels`, in
    /// creation order: those whose label selector matches them, as a
    /// Kubernetes selector would (a session without labels is not matched by
    /// `agent=sub`, and is by `!agent`).
    pub async fn applying_to(&self, labels: &HashMap<String, String>) -> Vec<Breakpoint> {
        self.listed(|spec| verdict::applies_to(&spec.label_selector, labels))
    }

    /// Breakpoints from the event stream's state, which is the store as of
    /// its latest change, with the hits counted since; so listing — done on
    /// every session start and every probe resume — never reads the database.
    fn listed(&self, keep: impl Fn(&BreakpointSpec) -> bool) -> Vec<Breakpoint> {
        let now = now_us();
        self.core
            .bus
            .with_view(|v| v.breakpoints())
            .into_iter()
            .filter(|bp| keep(&bp.spec.clone().unwrap_or_default()))
            .map(|mut bp| {
                let expired = bp
                    .spec
                    .as_ref()
                    .and_then(|s| s.expires_at.as_ref())
                    .is_some_and(|t| us_from_timestamp(t) <= now);
                bp.spent |= expired;
                bp.hit_count += self.core.hits.unpublished(&bp.id);
                bp
            })
            .collect()
    }

    /// Validates and stores a new breakpoint.
    /// `by` is the caller's authenticated identity, kept as `created_by`;
    /// `within` its deadline, and a caller that goes away before the
    /// write's commit began takes the write with it.
    pub async fn add(
        &self,
        spec: Option<BreakpointSpec>,
        by: &str,
        within: Within,
    ) -> ApiResult<Breakpoint> {
        let mut spec = spec.ok_or_else(|| ApiError::invalid_field("spec", "is required"))?;
        check(&spec, true)?;
        spec.enabled.get_or_insert(true);
        let (order, core) = (self.order.clone(), self.core.clone());
        // An add reads nothing, so it holds the change order only while its
        // write is handed to the store: adds made together share a commit.
        let by = by.to_owned();
        let _waiting = within.waiting();
        tokio::spawn(async move {
            let held = order.hold().await;
            let ticket = order.ticket(&held);
            let queued = core.store.queue_insert(&spec, now_us(), &by, &within).await;
            drop(held);
            let stored = queued.await;
            let added = stored.map(|stored| (BreakpointChange::Added, to_proto(&stored)));
            ticket.in_turn(|| core.announce(added)).await
        })
        .await
        .unwrap_or_else(|err| Err(ApiError::internal(format!("breakpoint change: {err}"))))
    }

    /// Removes a breakpoint.
    pub async fn remove(&self, id: &str, within: Within) -> ApiResult<Breakpoint> {
        let row = parse_id(id)?;
        let id = id.to_owned();
        self.change(&within.clone(), |core| async move {
            let stored = core
                .store
                .delete(row, &within)
                .await?
                .ok_or_else(|| not_found(&id))?;
            Ok((BreakpointChange::Removed, core.with_counted_hits(&stored)))
        })
        .await
    }

    /// Changes the fields of a breakpoint named by `mask` (all of them when empty).
    pub async fn update(
        &self,
        id: &str,
        new: Option<BreakpointSpec>,
        mask: Option<FieldMask>,
        by: &str,
        within: Within,
    ) -> ApiResult<Breakpoint> {
        let row = parse_id(id)?;
        let new = new.ok_or_else(|| ApiError::invalid_field("spec", "is required"))?;
        let paths = mask.map(|m| m.paths).unwrap_or_default();
        if let Some(bad) = paths.iter().find(|p| !MASK_PATHS.contains(&p.as_str())) {
            return Err(ApiError::invalid_field(
                "update_mask",
                format!(
                    "unknown path {}; allowed: {}",
                    crate::error::quote(bad),
                    MASK_PATHS.join(", ")
                ),
            ));
        }
        let id = id.to_owned();
        let by = by.to_owned();
        self.change(&within.clone(), |core| async move {
            // The row is read before it is written: while the store is
            // known to be down the change is refused before the read waits.
            core.store.check_up("the changed breakpoint")?;
            let current = core.store.get(row).await?.ok_or_else(|| not_found(&id))?;
            let merged = merge(current.spec, new, &paths);
            check(
                &merged,
                paths.is_empty() || paths.iter().any(|p| p == "expires_at"),
            )?;
            let stored = core
                .store
                .update(row, &merged, now_us(), &by, &within)
                .await?
                .ok_or_else(|| not_found(&id))?;
            Ok((BreakpointChange::Updated, core.with_counted_hits(&stored)))
        })
        .await
    }

    /// A hit of breakpoint `id` in some session: `decide` gets the breakpoint
    /// as it is with this hit counted (`None` when it no longer exists) and
    /// gives the verdict; the hit is counted when the verdict says so. The
    /// count is kept in memory and reaches the store and the event stream in
    /// batches (`hits.rs`): a hit is on the path of every pause it causes,
    /// and hot loops of auto-continued hits would otherwise flood both. The
    /// hit that spends `max_hits` is published at once, so every session
    /// disarms the breakpoint without waiting for the batch.
    pub async fn hit_with(
        &self,
        id: &str,
        decide: impl FnOnce(Option<&Breakpoint>) -> Verdict,
    ) -> Verdict {
        let _order = self.order.hold().await;
        let core = &self.core;
        let Some(mut breakpoint) = core.bus.with_view(|v| v.breakpoint(id)) else {
            return decide(None);
        };
        breakpoint.hit_count += core.hits.unpublished(id) + 1;
        let verdict = decide(Some(&breakpoint));
        if !verdict.counts() {
            return verdict;
        }
        let Ok(row) = parse_id(id) else {
            return verdict;
        };
        core.hits.count(row, id);
        let spec = breakpoint.spec.clone().unwrap_or_default();
        if spec.max_hits > 0 && breakpoint.hit_count >= u64::from(spec.max_hits) {
            breakpoint.spent = true;
            core.hits.take_unpublished(id);
            core.publish(BreakpointChange::Hit, breakpoint);
        }
        verdict
    }

    /// Writes the hits counted so far to the store (at shutdown); hits the
    /// store refuses now are lost, and the log says how many.
    pub async fn flush_hits(&self) {
        if !self.core.hits.flush().await {
            tracing::warn!(
                store = %self.core.store.place(),
                hits = self.core.hits.unwritten(),
                "breakpoint hits not stored at shutdown are lost"
            );
        }
    }

    /// Writes the hits counted so far now: false when the store refused
    /// them (they are kept and written again later).
    pub async fn write_hits(&self) -> bool {
        self.core.hits.flush().await
    }

    /// Hits counted and not in the store yet.
    pub fn unwritten_hits(&self) -> u64 {
        self.core.hits.unwritten()
    }

    /// The event bus the changes are published on.
    pub fn bus(&self) -> &Arc<EventBus> {
        &self.core.bus
    }
}

impl Core {
    /// Publishes a change the store made, in its turn; a refused one
    /// publishes nothing.
    fn announce(
        &self,
        changed: ApiResult<(BreakpointChange, Breakpoint)>,
    ) -> ApiResult<Breakpoint> {
        let (change, breakpoint) = changed?;
        let published = self.publish(change, breakpoint);
        self.watch_expiry(&published);
        Ok(published)
    }

    fn watch_expiry(&self, breakpoint: &Breakpoint) {
        if breakpoint
            .spec
            .as_ref()
            .is_some_and(|s| s.expires_at.is_some())
        {
            self.expiries.notify_one();
        }
    }

    /// A stored breakpoint with the hits counted so far, some of which the
    /// store may not have yet; the caller publishes it, so the hits not
    /// published yet are taken into it.
    fn with_counted_hits(&self, stored: &StoredBreakpoint) -> Breakpoint {
        let id = format!("bp-{}", stored.id);
        let counted = self
            .bus
            .with_view(|v| v.breakpoint(&id))
            .map_or(0, |b| b.hit_count)
            + self.hits.take_unpublished(&id);
        to_proto(&StoredBreakpoint {
            hit_count: stored.hit_count.max(counted),
            ..stored.clone()
        })
    }

    fn publish(&self, change: BreakpointChange, breakpoint: Breakpoint) -> Breakpoint {
        self.bus.publish(
            "",
            Payload::BreakpointUpdated(Box::new(BreakpointUpdated {
                change: change.into(),
                breakpoint: Some(breakpoint.clone()),
                status: None,
            })),
        );
        breakpoint
    }
}

/// Sizes first (`LIMIT_EXCEEDED`, before anything is parsed), then shape
/// and the small languages (`INVALID_ARGUMENT`).
fn check(spec: &BreakpointSpec, check_expiry: bool) -> ApiResult<()> {
    crate::limits::breakpoint_spec(spec, "spec").check()?;
    let checks = validate::Checks {
        expiry_after_us: check_expiry.then(now_us),
    };
    let violations = validate::violations(spec, "spec", &checks);
    if violations.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(violations))
    }
}

fn merge(mut current: BreakpointSpec, new: BreakpointSpec, paths: &[String]) -> BreakpointSpec {
    if paths.is_empty() {
        let mut new = new;
        new.enabled.get_or_insert(true);
        return new;
    }
    for path in paths {
        match path.as_str() {
            "source" | "function" | "exception" | "probe" => {
                current.location = new.location.clone()
            }
            "enabled" => current.enabled = Some(new.enabled.unwrap_or(false)),
            "condition" => current.condition = new.condition.clone(),
            "hit_condition" => current.hit_condition = new.hit_condition.clone(),
            "label_selector" => current.label_selector = new.label_selector.clone(),
            "expires_at" => current.expires_at = new.expires_at,
            "max_hits" => current.max_hits = new.max_hits,
            "action" => current.action = new.action,
            "log_message" => current.log_message = new.log_message.clone(),
            "hold_limit" => current.hold_limit = new.hold_limit,
            _ => {}
        }
    }
    current
}

/// Accepts "bp-7" (the API form) and "7".
fn parse_id(id: &str) -> ApiResult<i64> {
    id.strip_prefix("bp-")
        .unwrap_or(id)
        .parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            ApiError::invalid_field(
                "id",
                format!(
                    "{} is not a breakpoint id like \"bp-7\"",
                    crate::error::quote(id)
                ),
            )
        })
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorReason::BreakpointNotFound,
        format!("no breakpoint {}", crate::error::quote(id)),
    )
    .with("breakpoint_id", crate::error::clip(id))
}

/// The API form of a stored breakpoint.
fn to_proto(stored: &StoredBreakpoint) -> Breakpoint {
    let expired = stored
        .spec
        .expires_at
        .as_ref()
        .is_some_and(|t| us_from_timestamp(t) <= now_us());
    let exhausted = stored.spec.max_hits > 0 && stored.hit_count >= u64::from(stored.spec.max_hits);
    Breakpoint {
        id: format!("bp-{}", stored.id),
        spec: Some(stored.spec.clone()),
        hit_count: stored.hit_count,
        created_at: Some(timestamp_from_us(stored.created_at_us)),
        updated_at: Some(timestamp_from_us(stored.updated_at_us)),
        spent: expired || exhausted,
        created_by: stored.created_by.clone(),
        updated_by: stored.updated_by.clone(),
    }
}
