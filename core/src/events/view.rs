//! The daemon's state as the event stream describes it. The bus applies every
//! event here under the same lock that numbers it, so a snapshot and a
//! subscription can start at exactly the same instant.

use std::collections::{BTreeMap, HashMap, VecDeque};

use prost::Message;
use stepd_proto::v1::{
    Breakpoint, BreakpointChange, BreakpointStatus, Event, Pause, Session, SessionState, Snapshot,
    event::Payload,
};

use super::Filter;
use crate::metrics::Counts;

/// How many ended sessions snapshots still show.
const ENDED_SESSIONS_KEPT: usize = 64;

/// Sessions, pending pauses and breakpoints, as of the latest event.
#[derive(Debug, Default)]
pub struct StateView {
    sessions: BTreeMap<String, Session>,
    ended: VecDeque<String>,
    pauses: Pauses,
    breakpoints: BTreeMap<u64, Breakpoint>,
    statuses: BTreeMap<(String, String), BreakpointStatus>,
}

/// Pending pauses in the order they stopped, found by key without a scan:
/// a session that ends with thousands pending resolves each of them, and
/// each resolution must not scan the others.
#[derive(Debug, Default)]
struct Pauses {
    by_order: BTreeMap<u64, Pause>,
    order_of: HashMap<String, u64>,
    next: u64,
}

impl Pauses {
    /// Adds a pause, or replaces the one with its key where it stands.
    fn upsert(&mut self, pause: Pause) {
        if let Some(order) = self.order_of.get(&pause.key) {
            self.by_order.insert(*order, pause);
            return;
        }
        self.next += 1;
        self.order_of.insert(pause.key.clone(), self.next);
        self.by_order.insert(self.next, pause);
    }

    fn remove(&mut self, key: &str) {
        if let Some(order) = self.order_of.remove(key) {
            self.by_order.remove(&order);
        }
    }

    fn retain(&mut self, keep: impl Fn(&Pause) -> bool) {
        let order_of = &mut self.order_of;
        self.by_order.retain(|_, p| {
            let kept = keep(p);
            if !kept {
                order_of.remove(&p.key);
            }
            kept
        });
    }

    fn contains(&self, key: &str) -> bool {
        self.order_of.contains_key(key)
    }

    fn iter(&self) -> impl Iterator<Item = &Pause> {
        self.by_order.values()
    }
}

fn bp_order(id: &str) -> u64 {
    id.strip_prefix("bp-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX)
}

impl StateView {
    /// Replaces the breakpoints (at start-up, from the store).
    pub fn seed_breakpoints(&mut self, breakpoints: Vec<Breakpoint>) {
        self.breakpoints = breakpoints
            .into_iter()
            .map(|bp| (bp_order(&bp.id), bp))
            .collect();
    }

    /// Applies one event. Returns the id of a session whose history may now be
    /// forgotten (an ended session pushed out of the view).
    pub fn apply(&mut self, event: &Event) -> Option<String> {
        let sid = &event.session_id;
        match event.payload.as_ref()? {
            Payload::BreakpointUpdated(update) => {
                let bp = update.breakpoint.as_ref()?;
                match BreakpointChange::try_from(update.change) {
                    Ok(BreakpointChange::Removed) => {
                        self.breakpoints.remove(&bp_order(&bp.id));
                        self.statuses.retain(|(_, b), _| *b != bp.id);
                    }
                    Ok(BreakpointChange::Status) => {
                        if let Some(status) = &update.status {
                            // Listed on its own (GetSession, snapshots), a
                            // status must say which breakpoint it places.
                            let mut status = status.clone();
                            status.breakpoint_id.clone_from(&bp.id);
                            self.statuses.insert((sid.clone(), bp.id.clone()), status);
                        }
                    }
                    _ => {
                        self.breakpoints.insert(bp_order(&bp.id), bp.clone());
                    }
                }
            }
            Payload::SessionStarted(started) => {
                let session = started.session.clone()?;
                self.sessions.insert(session.id.clone(), session);
            }
            Payload::SessionUpdated(updated) => {
                let record = updated.session.clone()?;
                if let Some(s) = self.sessions.get_mut(sid) {
                    *s = merge_update(s, record);
                }
            }
            Payload::SessionEnded(ended) => {
                if let Some(s) = self.sessions.get_mut(sid) {
                    s.state = SessionState::Ended.into();
                    s.end_reason = ended.reason;
                    s.end_detail.clone_from(&ended.detail);
                    s.exit_code = ended.exit_code;
                    s.signal.clone_from(&ended.signal);
                    s.ended_at = event.time;
                    for t in &mut s.threads {
                        t.stopped = false;
                        t.pause_key.clear();
                    }
                }
                self.pauses.retain(|p| p.session_id != *sid);
                self.statuses.retain(|(s, _), _| s != sid);
                self.ended.push_back(sid.clone());
                if self.ended.len() > ENDED_SESSIONS_KEPT {
                    let old = self.ended.pop_front()?;
                    self.sessions.remove(&old);
                    return Some(old);
                }
            }
            Payload::Stopped(stopped) => {
                let pause = stopped.pause.clone()?;
                if let Some(s) = self.sessions.get_mut(sid) {
                    s.state = SessionState::Stopped.into();
                    if let Some(t) = s.threads.iter_mut().find(|t| t.id == pause.thread_id) {
                        t.stopped = true;
                        t.pause_key.clone_from(&pause.key);
                    }
                }
                self.pauses.upsert(pause);
            }
            Payload::PauseResolved(resolved) => {
                self.pauses.remove(&resolved.key);
            }
            Payload::Continued(cont) => {
                if let Some(s) = self.sessions.get_mut(sid) {
                    for t in &mut s.threads {
                        if cont.thread_id == 0 || t.id == cont.thread_id {
                            t.stopped = false;
                            t.pause_key.clear();
                        }
                    }
                    if s.threads.iter().all(|t| !t.stopped) {
                        s.state = SessionState::Running.into();
                    }
                }
            }
            Payload::ThreadChanged(changed) => {
                let thread = changed.thread.clone()?;
                if let Some(s) = self.sessions.get_mut(sid) {
                    s.threads.retain(|t| t.id != thread.id);
                    if changed.reason != "exited" {
                        s.threads.push(thread);
                    }
                }
            }
            _ => {}
        }
        None
    }

    /// The snapshot a subscriber with `filter` sees.
    pub fn snapshot(&self, filter: &Filter, seq: u64, instance_id: &str) -> Snapshot {
        let wanted = |sid: &str| filter.admits_session(sid);
        Snapshot {
            seq,
            instance_id: instance_id.to_owned(),
            sessions: self
                .sessions
                .values()
                .filter(|s| wanted(&s.id))
                .cloned()
                .collect(),
            pauses: self
                .pauses
                .iter()
                .filter(|p| wanted(&p.session_id))
                .cloned()
                .collect(),
            breakpoints: self.breakpoints.values().cloned().collect(),
            breakpoint_statuses: self
                .statuses
                .iter()
                .filter(|((sid, _), _)| wanted(sid))
                .map(|(_, status)| status.clone())
                .collect(),
            more: false,
            part: 0,
        }
    }

    /// Whether the pause `key` is pending, found without a scan.
    pub fn has_pause(&self, key: &str) -> bool {
        self.pauses.contains(key)
    }

    /// Pending pauses, optionally of one session.
    pub fn pauses(&self, session_id: Option<&str>) -> Vec<Pause> {
        self.pauses
            .iter()
            .filter(|p| session_id.is_none_or(|sid| p.session_id == sid))
            .cloned()
            .collect()
    }

    /// Adds the sessions not ended (by kind and state) and the pending
    /// pauses to `counts`.
    /// With `replica`, only the sessions and pauses that replica runs.
    pub fn tally(&self, counts: &mut Counts, replica: Option<&str>) {
        let counted = |id: &str| replica.is_none_or(|r| r == id);
        for session in self.sessions.values() {
            if session.state != SessionState::Ended as i32 && counted(&session.replica_id) {
                counts.add_session(session.kind(), session.state());
            }
        }
        counts.pending_pauses = self
            .pauses
            .iter()
            .filter(|p| counted(&p.replica_id))
            .count() as u64;
    }

    /// How many breakpoints are stored.
    pub fn breakpoint_count(&self) -> usize {
        self.breakpoints.len()
    }
}

/// A session_updated record over the current one: threads, state and the
/// end stay as their own events made them, the rest is the update's.
fn merge_update(current: &Session, update: Session) -> Session {
    Session {
        id: current.id.clone(),
        state: current.state,
        threads: current.threads.clone(),
        ended_at: current.ended_at,
        end_reason: current.end_reason,
        end_detail: current.end_detail.clone(),
        exit_code: current.exit_code,
        signal: current.signal.clone(),
        ..update
    }
}

impl StateView {
    /// Sessions, oldest first (ids are UUIDv7, so id order is start order).
    pub fn sessions(&self, include_ended: bool) -> Vec<Session> {
        self.sessions
            .values()
            .filter(|s| include_ended || s.state != SessionState::Ended as i32)
            .cloned()
            .collect()
    }

    /// One session.
    pub fn session(&self, id: &str) -> Option<Session> {
        self.sessions.get(id).cloned()
    }

    /// Every breakpoint, in creation order.
    pub fn breakpoints(&self) -> Vec<Breakpoint> {
        self.breakpoints.values().cloned().collect()
    }

    /// Every breakpoint, in creation order, without copying them.
    pub fn each_breakpoint(&self) -> impl Iterator<Item = &Breakpoint> {
        self.breakpoints.values()
    }

    /// One breakpoint by id.
    pub fn breakpoint(&self, id: &str) -> Option<Breakpoint> {
        self.breakpoints.get(&bp_order(id)).cloned()
    }

    /// Placement of every breakpoint in one session.
    pub fn statuses_of(&self, session_id: &str) -> Vec<BreakpointStatus> {
        self.statuses
            .iter()
            .filter(|((sid, _), _)| sid == session_id)
            .map(|(_, s)| s.clone())
            .collect()
    }
}

/// Splits a snapshot into parts of at most `budget` bytes each (a single
/// session, pause or breakpoint larger than that is a part of its own), in
/// order: sessions, pauses, breakpoints, placements. Every part has the
/// snapshot's seq and instance; all but the last have `more` set. A snapshot
/// within the budget is one part, as it was.
pub fn snapshot_parts(snapshot: Snapshot, budget: usize) -> Vec<Snapshot> {
    let (seq, instance_id) = (snapshot.seq, snapshot.instance_id.clone());
    let empty = move || Snapshot {
        seq,
        instance_id: instance_id.clone(),
        ..Default::default()
    };
    let mut parts = Parts {
        // The fixed fields, with room for `more` and `part`.
        base: empty().encoded_len() + 8,
        bytes: 0,
        budget,
        parts: vec![empty()],
        empty: Box::new(empty),
    };
    parts.bytes = parts.base;
    parts.place(snapshot.sessions, |p| &mut p.sessions);
    parts.place(snapshot.pauses, |p| &mut p.pauses);
    parts.place(snapshot.breakpoints, |p| &mut p.breakpoints);
    parts.place(snapshot.breakpoint_statuses, |p| &mut p.breakpoint_statuses);
    let mut parts = parts.parts;
    let count = parts.len();
    for (i, part) in parts.iter_mut().enumerate() {
        part.part = u32::try_from(i).unwrap_or(u32::MAX);
        part.more = i + 1 < count;
    }
    parts
}

/// Snapshot parts being filled.
struct Parts {
    base: usize,
    bytes: usize,
    budget: usize,
    parts: Vec<Snapshot>,
    empty: Box<dyn Fn() -> Snapshot>,
}

impl Parts {
    fn place<T: Message>(&mut self, items: Vec<T>, list: impl Fn(&mut Snapshot) -> &mut Vec<T>) {
        for item in items {
            let size = crate::limits::framed_len(&item);
            if self.bytes + size > self.budget && self.bytes > self.base {
                self.parts.push((self.empty)());
                self.bytes = self.base;
            }
            self.bytes += size;
            let part = self.parts.last_mut().expect("there is always a part");
            list(part).push(item);
        }
    }
}

#[cfg(test)]
mod tests {
    use stepd_proto::v1::{BreakpointSpec, FunctionLocation, breakpoint_spec::Location};

    use super::*;

    fn breakpoint(id: u64, name_bytes: usize) -> Breakpoint {
        Breakpoint {
            id: format!("bp-{id}"),
            spec: Some(BreakpointSpec {
                location: Some(Location::Function(FunctionLocation {
                    name: "f".repeat(name_bytes),
                })),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_small_snapshot_is_one_part() {
        let snapshot = Snapshot {
            seq: 7,
            instance_id: "i".into(),
            breakpoints: vec![breakpoint(1, 10)],
            ..Default::default()
        };
        let parts = snapshot_parts(snapshot.clone(), 1 << 20);
        assert_eq!(parts, [snapshot]);
    }

    #[test]
    fn a_large_snapshot_comes_in_parts_within_the_budget() {
        let snapshot = Snapshot {
            seq: 7,
            instance_id: "i".into(),
            sessions: vec![Session {
                id: "s".into(),
                ..Default::default()
            }],
            breakpoints: (1..=10).map(|i| breakpoint(i, 300)).collect(),
            breakpoint_statuses: vec![BreakpointStatus::default()],
            ..Default::default()
        };
        let budget = 1000;
        let parts = snapshot_parts(snapshot.clone(), budget);
        assert!(parts.len() > 3, "{}", parts.len());
        for (i, part) in parts.iter().enumerate() {
            assert!(
                part.encoded_len() <= budget,
                "part {i}: {}",
                part.encoded_len()
            );
            assert_eq!((part.seq, part.instance_id.as_str()), (7, "i"));
            assert_eq!(part.part as usize, i);
            assert_eq!(part.more, i + 1 < parts.len());
        }
        let merged: Vec<_> = parts.iter().flat_map(|p| p.breakpoints.clone()).collect();
        assert_eq!(merged, snapshot.breakpoints);
        assert_eq!(parts.iter().map(|p| p.sessions.len()).sum::<usize>(), 1);
        assert_eq!(
            parts
                .iter()
                .map(|p| p.breakpoint_statuses.len())
                .sum::<usize>(),
            1
        );
        // One breakpoint larger than the budget is a part of its own.
        let big = Snapshot {
            breakpoints: vec![breakpoint(1, 10), breakpoint(2, 5000), breakpoint(3, 10)],
            ..Default::default()
        };
        let parts = snapshot_parts(big, budget);
        let sizes: Vec<_> = parts.iter().map(|p| p.breakpoints.len()).collect();
        assert_eq!(sizes, [1, 1, 1]);
    }
}
