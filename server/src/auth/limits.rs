//! Caps per identity: a daemon-wide cap alone lets one client take every
//! slot; each identity also gets at most its share.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use stepd_proto::v1::ErrorReason;

use crate::error::{ApiError, ApiResult};

/// Counts what each identity holds of one resource, up to `max` each.
pub struct PerIdentity {
    limit: &'static str,
    what: &'static str,
    max: usize,
    held: Mutex<HashMap<String, usize>>,
}

/// One unit held by an identity; dropping it gives it back.
pub struct Held {
    owner: Arc<PerIdentity>,
    name: String,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.owner.lock();
        if let Some(n) = held.get_mut(&self.name) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.name);
            }
        }
    }
}

impl PerIdentity {
    /// A counter of `what` (for messages) refusing past `max` per identity
    /// with `limit` (the setting's name) in the error.
    pub fn new(limit: &'static str, what: &'static str, max: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            what,
            max,
            held: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes one unit for identity `name`, or LIMIT_EXCEEDED when it holds
    /// `max` already.
    pub fn take(self: &Arc<Self>, name: &str) -> ApiResult<Held> {
        let mut held = self.lock();
        let n = held.entry(name.to_owned()).or_insert(0);
        if *n >= self.max {
            return Err(ApiError::new(
                ErrorReason::LimitExceeded,
                format!(
                    "{} has {} {} open, the most one identity may have (--{})",
                    crate::error::clip(name),
                    self.max,
                    self.what,
                    self.limit.replace('_', "-"),
                ),
            )
            .with("limit", self.limit)
            .with("max", self.max.to_string())
            .with("identity", crate::error::clip(name)));
        }
        *n += 1;
        Ok(Held {
            owner: self.clone(),
            name: name.to_owned(),
        })
    }

    /// What `name` holds now.
    pub fn held(&self, name: &str) -> usize {
        self.lock().get(name).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_identity_has_its_own_share() {
        let caps = PerIdentity::new("max_subscribers_per_identity", "subscribers", 2);
        let a1 = caps.take("a").unwrap();
        let _a2 = caps.take("a").unwrap();
        let err = caps.take("a").err().unwrap();
        assert_eq!(err.reason(), ErrorReason::LimitExceeded);
        let _b = caps.take("b").expect("another identity is not affected");
        drop(a1);
        assert_eq!(caps.held("a"), 1);
        caps.take("a").expect("a freed slot is reusable");
    }
}
