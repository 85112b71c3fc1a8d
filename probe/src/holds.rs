//! The indexes a probe session keeps beside its pause book: the pause of
//! each held point by the probe's hit id, and when each hold reaches its
//! limit, soonest first; and how long a hold may last. No I/O: the session
//! decides with them and acts.

use std::{
    collections::{BTreeSet, HashMap},
    time::Duration,
};

use tokio::time::Instant;

/// The limit of a hold: the shortest of those its breakpoints set, else
/// the session's `default`.
pub(super) fn limit(set: impl IntoIterator<Item = Duration>, default: Duration) -> Duration {
    set.into_iter().min().unwrap_or(default)
}

/// What is left of `limit` for a hold the program began `waited` ago;
/// None once nothing is.
pub(super) fn left(limit: Duration, waited: Duration) -> Option<Duration> {
    limit.checked_sub(waited).filter(|d| !d.is_zero())
}

#[derive(Debug, Default)]
pub(super) struct Holds {
    /// The pause key of each held point, by hit id.
    by_hit: HashMap<String, String>,
    /// When each held point reaches its limit, soonest first.
    deadlines: BTreeSet<(Instant, String)>,
}

impl Holds {
    /// The pause key of the hold of `hit_id`, while it is held.
    pub fn key_of(&self, hit_id: &str) -> Option<&str> {
        self.by_hit.get(hit_id).map(String::as_str)
    }

    /// The point of `hit_id` holds as pause `key` until `deadline`.
    pub fn hold(&mut self, hit_id: String, key: String, deadline: Instant) {
        self.by_hit.insert(hit_id, key.clone());
        self.deadlines.insert((deadline, key));
    }

    /// The hold of `hit_id` (pause `key`, limit `deadline`) ended.
    pub fn forget(&mut self, hit_id: &str, key: &str, deadline: Instant) {
        self.by_hit.remove(hit_id);
        self.deadlines.remove(&(deadline, key.to_owned()));
    }

    /// When the next hold reaches its limit.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(deadline, _)| *deadline)
    }

    /// The pauses whose limit has come by `now`, soonest first; each is
    /// given once (its hold stays indexed until it is forgotten).
    pub fn expired(&mut self, now: Instant) -> Vec<String> {
        let mut expired = Vec::new();
        while self.deadlines.first().is_some_and(|(d, _)| *d <= now) {
            if let Some((_, key)) = self.deadlines.pop_first() {
                expired.push(key);
            }
        }
        expired
    }

    /// Every hold ended (the session ends).
    pub fn clear(&mut self) {
        self.by_hit.clear();
        self.deadlines.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn how_long_a_hold_may_last() {
        let s = Duration::from_secs;
        let default = s(60);
        // (limits its breakpoints set, waited) → (limit, left)
        let cases = [
            (vec![], s(0), s(60), Some(s(60))),
            (vec![s(30), s(10)], s(0), s(10), Some(s(10))),
            (vec![s(90)], s(0), s(90), Some(s(90))),
            (vec![], s(45), s(60), Some(s(15))),
            (vec![], s(60), s(60), None),
            (vec![s(10)], s(11), s(10), None),
        ];
        for (set, waited, want_limit, want_left) in cases {
            let got = limit(set.clone(), default);
            assert_eq!(got, want_limit, "{set:?}");
            assert_eq!(left(got, waited), want_left, "{set:?} {waited:?}");
        }
    }

    #[test]
    fn holds_reach_their_limits_soonest_first_and_once() {
        let now = Instant::now();
        let mut holds = Holds::default();
        holds.hold("h1".into(), "p1".into(), now + Duration::from_secs(30));
        holds.hold("h2".into(), "p2".into(), now + Duration::from_secs(10));
        holds.hold("h3".into(), "p3".into(), now + Duration::from_secs(20));
        assert_eq!(holds.next_deadline(), Some(now + Duration::from_secs(10)));
        assert!(holds.expired(now).is_empty());
        assert_eq!(holds.expired(now + Duration::from_secs(25)), ["p2", "p3"]);
        assert!(
            holds.expired(now + Duration::from_secs(25)).is_empty(),
            "once"
        );
        assert_eq!(holds.key_of("h2"), Some("p2"), "held until forgotten");
        assert_eq!(holds.next_deadline(), Some(now + Duration::from_secs(30)));
    }

    #[test]
    fn a_forgotten_hold_is_neither_found_nor_due() {
        let now = Instant::now();
        let mut holds = Holds::default();
        let deadline = now + Duration::from_secs(5);
        holds.hold("h1".into(), "p1".into(), deadline);
        holds.forget("h1", "p1", deadline);
        assert_eq!(holds.key_of("h1"), None);
        assert_eq!(holds.next_deadline(), None);
        assert!(holds.expired(deadline).is_empty());
        holds.hold("h2".into(), "p2".into(), deadline);
        holds.clear();
        assert_eq!(holds.key_of("h2"), None);
        assert_eq!(holds.next_deadline(), None);
    }
}
