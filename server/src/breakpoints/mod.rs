//! Breakpoints: validation, persistence and change events. Breakpoints are
//! project state owned by the daemon; sessions apply them by label selector.

pub mod condition;
mod expiry;
mod glob;
mod hit_condition;
mod hits;
mod selector;
mod validate;

use std::{collections::HashMap, sync::Arc};

use prost_types::FieldMask;
use stepd_proto::v1::{
    Breakpoint, BreakpointChange, BreakpointSpec, BreakpointUpdated, ErrorReason, event::Payload,
};
use tokio::sync::Mutex;

pub use glob::Glob;
pub use hit_condition::HitCondition;
pub use selector::LabelSelector;

use crate::{
    error::{ApiError, ApiResult},
    events::EventBus,
    store::{Store, StoredBreakpoint},
    time::{now_us, timestamp_from_us, us_from_timestamp},
};

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

/// Breakpoint operations: every change is stored, then published.
pub struct Breakpoints {
    store: Store,
    bus: Arc<EventBus>,
    /// Serialises changes so the event order always matches the store's order.
    write: Mutex<()>,
    /// Hits counted, on their way to the store.
    hits: Arc<hits::HitWriter>,
    /// Wakes the expiry watch when a breakpoint with an expiry is added or
    /// changed.
    expiries: Arc<tokio::sync::Notify>,
}

impl Breakpoints {
    /// Loads the stored breakpoints into the event bus's state.
    pub async fn load(store: Store, bus: Arc<EventBus>) -> anyhow::Result<Self> {
        let stored = store.list_breakpoints().await?;
        bus.seed_breakpoints(stored.iter().map(to_proto).collect());
        let expiries = Arc::new(tokio::sync::Notify::new());
        expiry::watch(bus.clone(), expiries.clone());
        Ok(Self {
            expiries,
            hits: hits::HitWriter::start(store.clone()),
            store,
            bus,
            write: Mutex::new(()),
        })
    }

    /// Breakpoints in creation order, optionally only those applying to `labels`.
    ///
    /// They come from the event stream's state, which is the store as of its
    /// latest change (and knows hits not written yet), so listing — done on
    /// every session start and every probe resume — never reads the database.
    pub async fn list(&self, for_labels: &HashMap<String, String>) -> ApiResult<Vec<Breakpoint>> {
        let now = now_us();
        Ok(self
            .bus
            .with_view(|v| v.breakpoints())
            .into_iter()
            .filter(|bp| {
                let selector = bp.spec.as_ref().map_or("", |s| s.label_selector.as_str());
                for_labels.is_empty()
                    || LabelSelector::parse(selector).is_ok_and(|sel| sel.matches(for_labels))
            })
            .map(|mut bp| {
                let expired = bp
                    .spec
                    .as_ref()
                    .and_then(|s| s.expires_at.as_ref())
                    .is_some_and(|t| us_from_timestamp(t) <= now);
                bp.spent |= expired;
                bp
            })
            .collect())
    }

    /// Validates and stores a new breakpoint.
    pub async fn add(&self, spec: Option<BreakpointSpec>) -> ApiResult<Breakpoint> {
        let mut spec = spec.ok_or_else(|| ApiError::invalid_field("spec", "is required"))?;
        check(&spec, true)?;
        spec.enabled.get_or_insert(true);
        let _order = self.write.lock().await;
        let stored = self.store.insert_breakpoint(&spec, now_us()).await?;
        let added = self.publish(BreakpointChange::Added, to_proto(&stored));
        self.watch_expiry(&added);
        Ok(added)
    }

    /// Removes a breakpoint.
    pub async fn remove(&self, id: &str) -> ApiResult<Breakpoint> {
        let row = parse_id(id)?;
        let _order = self.write.lock().await;
        let stored = self
            .store
            .delete_breakpoint(row)
            .await?
            .ok_or_else(|| not_found(id))?;
        Ok(self.publish(BreakpointChange::Removed, self.with_counted_hits(&stored)))
    }

    /// Changes the fields of a breakpoint named by `mask` (all of them when empty).
    pub async fn update(
        &self,
        id: &str,
        new: Option<BreakpointSpec>,
        mask: Option<FieldMask>,
    ) -> ApiResult<Breakpoint> {
        let row = parse_id(id)?;
        let new = new.ok_or_else(|| ApiError::invalid_field("spec", "is required"))?;
        let paths = mask.map(|m| m.paths).unwrap_or_default();
        if let Some(bad) = paths.iter().find(|p| !MASK_PATHS.contains(&p.as_str())) {
            return Err(ApiError::invalid_field(
                "update_mask",
                format!("unknown path {bad:?}; allowed: {}", MASK_PATHS.join(", ")),
            ));
        }
        let _order = self.write.lock().await;
        let current = self
            .store
            .get_breakpoint(row)
            .await?
            .ok_or_else(|| not_found(id))?;
        let merged = merge(current.spec, new, &paths);
        check(
            &merged,
            paths.is_empty() || paths.iter().any(|p| p == "expires_at"),
        )?;
        let stored = self
            .store
            .update_breakpoint(row, &merged, now_us())
            .await?
            .ok_or_else(|| not_found(id))?;
        let updated = self.publish(BreakpointChange::Updated, self.with_counted_hits(&stored));
        self.watch_expiry(&updated);
        Ok(updated)
    }

    /// Counts a hit in some session and publishes it (change HIT). The count
    /// is taken from the event stream's state and written to the store in the
    /// background: a hit is on the path of every pause it causes, and the
    /// database write would be most of its cost. `None` when the breakpoint
    /// has expired: it applies nowhere, so the hit is neither counted nor acted
    /// on (its session may not have heard of the expiry yet).
    pub async fn hit(&self, id: &str) -> ApiResult<Option<Breakpoint>> {
        let row = parse_id(id)?;
        let _order = self.write.lock().await;
        let mut breakpoint = self
            .bus
            .with_view(|v| v.breakpoint(id))
            .ok_or_else(|| not_found(id))?;
        if expiry::expired(&breakpoint) {
            return Ok(None);
        }
        breakpoint.hit_count += 1;
        let spec = breakpoint.spec.clone().unwrap_or_default();
        if spec.max_hits > 0 && breakpoint.hit_count >= u64::from(spec.max_hits) {
            breakpoint.spent = true;
        }
        self.hits.count(row);
        Ok(Some(self.publish(BreakpointChange::Hit, breakpoint)))
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

    /// Writes the hits counted so far to the store (at shutdown).
    pub async fn flush_hits(&self) {
        self.hits.flush().await;
    }

    /// A stored breakpoint with the hits counted so far, some of which the
    /// store may not have yet.
    fn with_counted_hits(&self, stored: &StoredBreakpoint) -> Breakpoint {
        let id = format!("bp-{}", stored.id);
        let counted = self
            .bus
            .with_view(|v| v.breakpoint(&id))
            .map_or(0, |b| b.hit_count);
        to_proto(&StoredBreakpoint {
            hit_count: stored.hit_count.max(counted),
            ..stored.clone()
        })
    }

    fn publish(&self, change: BreakpointChange, breakpoint: Breakpoint) -> Breakpoint {
        self.bus.publish(
            "",
            Payload::BreakpointUpdated(BreakpointUpdated {
                change: change.into(),
                breakpoint: Some(breakpoint.clone()),
                status: None,
            }),
        );
        breakpoint
    }
}

fn check(spec: &BreakpointSpec, check_expiry: bool) -> ApiResult<()> {
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
            ApiError::invalid_field("id", format!("{id:?} is not a breakpoint id like \"bp-7\""))
        })
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorReason::BreakpointNotFound,
        format!("no breakpoint {id}"),
    )
    .with("breakpoint_id", id)
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
    }
}
