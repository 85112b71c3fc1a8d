//! Breakpoints whose `expires_at` passes are announced once, as they expire
//! (`BREAKPOINT_CHANGE_EXPIRED`), so that sessions take them out of their
//! adapters and probes disarm them without waiting for anything else to
//! happen.

use std::{collections::HashSet, sync::Arc, time::Duration};

use stepd_proto::v1::{Breakpoint, BreakpointChange, BreakpointUpdated, event::Payload};
use tokio::sync::Notify;

use crate::{
    events::EventBus,
    time::{now_us, us_from_timestamp},
};

/// Watches the breakpoints in the event state; `changed` is notified when one
/// with an expiry is added or updated (it may be sooner than the one waited
/// for), so breakpoints without one never wake it.
pub fn watch(bus: Arc<EventBus>, changed: Arc<Notify>) {
    tokio::spawn(async move {
        let mut announced: HashSet<String> = HashSet::new();
        loop {
            let now = now_us();
            let (due, next) = bus.with_view(|v| scan(v.each_breakpoint(), now, &mut announced));
            for mut breakpoint in due {
                breakpoint.spent = true;
                bus.publish(
                    "",
                    Payload::BreakpointUpdated(Box::new(BreakpointUpdated {
                        change: BreakpointChange::Expired.into(),
                        breakpoint: Some(breakpoint),
                        status: None,
                    })),
                );
            }
            match next {
                Some(at) => {
                    let wait = Duration::from_micros(u64::try_from(at - now).unwrap_or(0));
                    tokio::select! {
                        () = changed.notified() => {}
                        () = tokio::time::sleep(wait) => {}
                    }
                }
                None => changed.notified().await,
            }
        }
    });
}

/// The breakpoints that expired and were not announced yet, and the next
/// expiry to wait for. An expiry moved into the future is forgotten, so it is
/// announced again when it comes.
fn scan<'a>(
    breakpoints: impl Iterator<Item = &'a Breakpoint>,
    now: i64,
    announced: &mut HashSet<String>,
) -> (Vec<Breakpoint>, Option<i64>) {
    let mut due = Vec::new();
    let mut next: Option<i64> = None;
    let mut present = HashSet::new();
    for bp in breakpoints {
        let Some(at) = bp
            .spec
            .as_ref()
            .and_then(|s| s.expires_at.as_ref())
            .map(us_from_timestamp)
        else {
            continue;
        };
        present.insert(bp.id.clone());
        if at <= now {
            if announced.insert(bp.id.clone()) {
                due.push(bp.clone());
            }
        } else {
            announced.remove(&bp.id);
            next = Some(next.map_or(at, |n| n.min(at)));
        }
    }
    announced.retain(|id| present.contains(id));
    (due, next)
}

#[cfg(test)]
mod tests {
    use prost_types::Timestamp;
    use stepd_proto::v1::BreakpointSpec;

    use super::*;

    fn bp(id: &str, expires_us: Option<i64>) -> Breakpoint {
        Breakpoint {
            id: id.into(),
            spec: Some(BreakpointSpec {
                expires_at: expires_us.map(|us| Timestamp {
                    seconds: us / 1_000_000,
                    nanos: 0,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn each_expiry_is_announced_once_and_again_after_a_new_one() {
        let mut announced = HashSet::new();
        let list = [
            bp("bp-1", Some(10_000_000)),
            bp("bp-2", Some(30_000_000)),
            bp("bp-3", None),
        ];
        let (due, next) = scan(list.iter(), 20_000_000, &mut announced);
        assert_eq!(
            due.iter().map(|b| b.id.as_str()).collect::<Vec<_>>(),
            ["bp-1"]
        );
        assert_eq!(next, Some(30_000_000));
        let (due, _) = scan(list.iter(), 20_000_000, &mut announced);
        assert!(due.is_empty(), "announced once");
        // bp-1 gets a later expiry: it is forgotten, then announced again.
        let moved = [bp("bp-1", Some(40_000_000)), bp("bp-2", Some(30_000_000))];
        let (due, next) = scan(moved.iter(), 20_000_000, &mut announced);
        assert!(due.is_empty());
        assert_eq!(next, Some(30_000_000));
        let (due, next) = scan(moved.iter(), 50_000_000, &mut announced);
        assert_eq!(due.len(), 2);
        assert_eq!(next, None);
    }
}
