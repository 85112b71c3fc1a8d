//! Caps on what clients hold at once, per daemon and per identity: a
//! daemon-wide cap alone lets one client take every slot, so each identity
//! also gets at most its share. Subscribe streams, Inspect inspectors and
//! sessions are counted here; pending pauses are counted by the pause
//! registry under its own lock.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use stepd_proto::v1::ErrorReason;

use crate::error::{ApiError, ApiResult};

/// One cap: its setting's name (the `limit` metadata) and its value.
#[derive(Debug, Clone, Copy)]
pub struct Cap {
    /// The setting, e.g. `max_sessions_per_identity`.
    pub limit: &'static str,
    /// The most allowed.
    pub max: usize,
}

/// Counts what each identity holds of one resource, refusing past the
/// per-identity cap and, when there is one, the daemon's.
pub struct Slots {
    what: &'static str,
    per_identity: Cap,
    total: Option<Cap>,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    by: HashMap<String, usize>,
    total: usize,
}

/// One unit held by an identity; dropping it gives it back.
pub struct Slot {
    owner: Arc<Slots>,
    name: String,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of {}", self.owner.what, self.name)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.owner.lock();
        held.total = held.total.saturating_sub(1);
        if let Some(n) = held.by.get_mut(&self.name) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.by.remove(&self.name);
            }
        }
    }
}

impl Slots {
    /// Slots of `what` (for messages) capped per identity only.
    pub fn new(what: &'static str, per_identity: Cap) -> Arc<Self> {
        Arc::new(Self {
            what,
            per_identity,
            total: None,
            held: Mutex::default(),
        })
    }

    /// Slots capped per identity and, at `total`, for the daemon.
    pub fn with_total(what: &'static str, per_identity: Cap, total: Cap) -> Arc<Self> {
        Arc::new(Self {
            what,
            per_identity,
            total: Some(total),
            held: Mutex::default(),
        })
    }

    /// No caps (tests and tools).
    pub fn unlimited(what: &'static str) -> Arc<Self> {
        Self::new(
            what,
            Cap {
                limit: "unlimited",
                max: usize::MAX,
            },
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes one unit for identity `name`: `LIMIT_EXCEEDED` naming the cap
    /// when the daemon holds its total (checked first) or `name` its share.
    pub fn take(self: &Arc<Self>, name: &str) -> ApiResult<Slot> {
        let mut held = self.lock();
        if let Some(total) = self.total
            && held.total >= total.max
        {
            return Err(ApiError::new(
                ErrorReason::LimitExceeded,
                format!(
                    "{} {} are open, the configured maximum (--{})",
                    total.max,
                    self.what,
                    flag(total.limit)
                ),
            )
            .with("limit", total.limit)
            .with("max", total.max.to_string()));
        }
        let n = held.by.get(name).copied().unwrap_or(0);
        if n >= self.per_identity.max {
            let cap = self.per_identity;
            return Err(ApiError::new(
                ErrorReason::LimitExceeded,
                format!(
                    "{} has {} {} open, the most one identity may have (--{})",
                    crate::error::clip(name),
                    cap.max,
                    self.what,
                    flag(cap.limit),
                ),
            )
            .with("limit", cap.limit)
            .with("max", cap.max.to_string())
            .with("identity", crate::error::clip(name)));
        }
        *held.by.entry(name.to_owned()).or_insert(0) += 1;
        held.total += 1;
        Ok(Slot {
            owner: self.clone(),
            name: name.to_owned(),
        })
    }

    /// What `name` holds now.
    pub fn held(&self, name: &str) -> usize {
        self.lock().by.get(name).copied().unwrap_or(0)
    }

    /// What every identity holds together.
    pub fn total(&self) -> usize {
        self.lock().total
    }
}

fn flag(limit: &str) -> String {
    limit.replace('_', "-")
}

#[cfg(test)]
mod tests {
    use super::*;

    const PER: Cap = Cap {
        limit: "max_subscribers_per_identity",
        max: 2,
    };

    #[test]
    fn each_identity_has_its_own_share() {
        let caps = Slots::new("subscribers", PER);
        let a1 = caps.take("a").unwrap();
        let _a2 = caps.take("a").unwrap();
        let err = caps.take("a").err().unwrap();
        assert_eq!(err.reason(), ErrorReason::LimitExceeded);
        let _b = caps.take("b").expect("another identity is not affected");
        drop(a1);
        assert_eq!(caps.held("a"), 1);
        caps.take("a").expect("a freed slot is reusable");
    }

    #[test]
    fn the_daemon_total_is_checked_first_and_freed_with_each_slot() {
        let total = Cap {
            limit: "max_subscribers",
            max: 3,
        };
        let caps = Slots::with_total("subscribers", PER, total);
        let held = [
            caps.take("a").unwrap(),
            caps.take("b").unwrap(),
            caps.take("c").unwrap(),
        ];
        let err = caps.take("d").err().unwrap();
        assert!(err.to_string().contains("--max-subscribers)"), "{err}");
        assert_eq!(caps.total(), 3);
        drop(held);
        assert_eq!(caps.total(), 0);
        assert_eq!(caps.held("a"), 0);
        caps.take("d").expect("freed slots are reusable");
    }
}
