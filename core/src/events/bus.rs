//! The event bus. Publishing takes one short lock: number the event, apply it
//! to the state view, keep it in its session's ring, hand it to the broadcast.
//! Fan-out is tokio's broadcast channel: one shared bounded buffer, so a slow
//! subscriber lags (and is resynchronised) instead of slowing anyone down.

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, HashMap, VecDeque},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
};

use stepd_proto::v1::{Breakpoint, Event, Gap, event::Payload};
use tokio::sync::broadcast;

use super::{Filter, StateView, published::Published};
use crate::{metrics::Counters, time::now_timestamp};

/// Key of the ring holding daemon-level events (no session).
const DAEMON_RING: &str = "";

/// Recent events of one session, for resuming subscribers.
#[derive(Debug, Default)]
struct Ring {
    /// Each event with the bytes it holds (see [`footprint`]).
    events: VecDeque<(Arc<Published>, usize)>,
    /// Bytes `events` hold.
    bytes: usize,
    /// Highest seq pushed out of the ring; a cursor below it cannot be replayed.
    evicted_through: u64,
}

impl Ring {
    /// Drops the oldest event; the bytes it freed.
    fn evict_oldest(&mut self) -> Option<usize> {
        let (old, bytes) = self.events.pop_front()?;
        self.bytes -= bytes;
        self.evicted_through = old.seq;
        Some(bytes)
    }
}

/// The memory an event kept in a ring holds: the event itself and its
/// allocation's header, and about its encoded size again for the strings and
/// lists it owns. The ring limits are in memory, not in encoded bytes: a
/// small probe report holds several times its encoded size.
fn footprint(event: &Published) -> usize {
    std::mem::size_of::<Published>() + 2 * std::mem::size_of::<usize>() + event.encoded_len()
}

#[derive(Debug)]
struct BusState {
    last_seq: u64,
    /// Cursors below this can never be replayed (earlier instance, dropped rings).
    floor: u64,
    rings: HashMap<String, Ring>,
    /// Bytes every ring holds together.
    ring_bytes_total: usize,
    view: StateView,
}

/// What a resuming stream gets from [`EventBus::catch_up`].
#[derive(Debug)]
pub enum CatchUp {
    /// Events after the cursor, and more after `through` (the last seq
    /// looked at, whether the filter passed it or not).
    More {
        /// The events the filter passes.
        events: Vec<Arc<Published>>,
        /// Where to go on from.
        through: u64,
    },
    /// The last events after the cursor, and the live receiver after them.
    Caught {
        /// The events the filter passes.
        events: Vec<Arc<Published>>,
        /// Live events from there on.
        rx: broadcast::Receiver<Arc<Published>>,
    },
    /// The cursor is no longer held: what was lost, a snapshot to go on
    /// from, and the live receiver after it.
    Lost {
        /// The gap event.
        gap: Box<Event>,
        /// The snapshot event.
        snapshot: Box<Event>,
        /// Live events from the snapshot on.
        rx: broadcast::Receiver<Arc<Published>>,
    },
}

/// How a subscription starts.
#[derive(Debug)]
pub enum Start {
    /// A fresh snapshot (stream-local event).
    Snapshot(Box<Event>),
    /// Exactly the events missed since the resume point.
    Replay(Vec<Arc<Published>>),
    /// The resume point is no longer held: what was lost, then a snapshot.
    Resync {
        /// The gap event.
        gap: Box<Event>,
        /// The snapshot event.
        snapshot: Box<Event>,
    },
}

/// The daemon's event bus.
#[derive(Debug)]
pub struct EventBus {
    state: Mutex<BusState>,
    live: broadcast::Sender<Arc<Published>>,
    ring_capacity: usize,
    ring_bytes: usize,
    /// Bytes all rings may hold together: with a thousand busy sessions the
    /// per-session bound alone would let the rings take gigabytes.
    ring_bytes_total: usize,
    instance_id: String,
    counters: Counters,
    /// Bytes of events published so far (encoded sizes), written under the
    /// publishing lock: with [`Published::offset`], how far a receiver is
    /// behind in memory.
    published_bytes: AtomicU64,
}

impl EventBus {
    /// A bus whose sequence starts after `first_seq - 1`; subscribers may lag
    /// `subscriber_buffer` events; each ring keeps `ring_capacity` events.
    ///
    /// The daemon starts the sequence at its start time in microseconds, so a
    /// cursor from an earlier instance is below the floor and resynchronises.
    pub fn new(
        instance_id: String,
        first_seq: u64,
        subscriber_buffer: usize,
        ring_capacity: usize,
    ) -> Self {
        let (live, _) = broadcast::channel(subscriber_buffer);
        let floor = first_seq.saturating_sub(1);
        Self {
            state: Mutex::new(BusState {
                last_seq: floor,
                floor,
                rings: HashMap::new(),
                ring_bytes_total: 0,
                view: StateView::default(),
            }),
            live,
            ring_capacity,
            ring_bytes: usize::MAX,
            ring_bytes_total: usize::MAX,
            instance_id,
            counters: Counters::default(),
            published_bytes: AtomicU64::new(0),
        }
    }

    /// Bounds each ring in bytes held (memory) as well as in events: the
    /// oldest events go first, and a cursor before them resynchronises as
    /// for a ring that is full by count.
    pub fn with_ring_bytes(mut self, ring_bytes: usize) -> Self {
        self.ring_bytes = ring_bytes;
        self
    }

    /// Bounds all rings together in bytes. Over it, the publishing session's
    /// ring gives up its oldest events first (a flood pays for itself); when
    /// it holds nothing but the new event, the largest ring does.
    pub fn with_ring_bytes_total(mut self, total: usize) -> Self {
        self.ring_bytes_total = total;
        self
    }

    fn lock(&self) -> MutexGuard<'_, BusState> {
        // A panic while holding the lock cannot leave the state half-written in
        // a way later readers would misread, so recover rather than cascade.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the daemon counts (events, gaps, commands): everything that
    /// counts holds the bus.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The daemon instance id carried by snapshots.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// Numbers, records and broadcasts an event of this daemon's: its own,
    /// or of a session it runs.
    pub fn publish(&self, session_id: &str, payload: Payload) -> Arc<Published> {
        let mut state = self.lock();
        self.publish_locked(&mut state, session_id, payload, true)
    }

    /// The same for an event of a session another replica runs (relayed
    /// here, or ended here on behalf of a lost replica): shown as any
    /// other, but not counted as published, so the replicas' counts add up
    /// to the cluster's (decision 172) without asking on every publish
    /// whose session it is.
    pub fn publish_theirs(&self, session_id: &str, payload: Payload) -> Arc<Published> {
        let mut state = self.lock();
        self.publish_locked(&mut state, session_id, payload, false)
    }

    /// Publishes several events of one session under one lock, in order: a
    /// probe's batch of reports pays for the lock once, and no other
    /// event lands between them.
    pub fn publish_all(&self, session_id: &str, payloads: impl IntoIterator<Item = Payload>) {
        let mut payloads = payloads.into_iter().peekable();
        if payloads.peek().is_none() {
            return;
        }
        let mut state = self.lock();
        for payload in payloads {
            self.publish_locked(&mut state, session_id, payload, true);
        }
    }

    fn publish_locked(
        &self,
        state: &mut BusState,
        session_id: &str,
        payload: Payload,
        counted: bool,
    ) -> Arc<Published> {
        state.last_seq += 1;
        let before = self.published_bytes.load(Ordering::Relaxed);
        let event = Arc::new(Published::after(
            Event {
                seq: state.last_seq,
                session_id: session_id.to_owned(),
                time: Some(now_timestamp()),
                payload: Some(payload),
            },
            before,
        ));
        self.published_bytes
            .store(event.offset(), Ordering::Relaxed);
        let forgotten = state.view.apply(&event);
        let key = if session_id.is_empty() {
            DAEMON_RING
        } else {
            session_id
        };
        let BusState {
            rings,
            ring_bytes_total,
            floor,
            ..
        } = state;
        // The key is copied only for a session's first event.
        let ring = match rings.get_mut(key) {
            Some(ring) => ring,
            None => rings.entry(key.to_owned()).or_default(),
        };
        let bytes = footprint(&event);
        ring.bytes += bytes;
        *ring_bytes_total += bytes;
        ring.events.push_back((event.clone(), bytes));
        while ring.events.len() > self.ring_capacity || ring.bytes > self.ring_bytes {
            let Some(freed) = ring.evict_oldest() else {
                break;
            };
            *ring_bytes_total -= freed;
        }
        while *ring_bytes_total > self.ring_bytes_total {
            let own = rings.get_mut(key).filter(|r| r.events.len() > 1);
            let victim = match own {
                Some(ring) => ring,
                None => match rings.values_mut().max_by_key(|r| r.bytes) {
                    Some(ring) => ring,
                    None => break,
                },
            };
            let Some(freed) = victim.evict_oldest() else {
                break;
            };
            *ring_bytes_total -= freed;
        }
        if let Some(old) = forgotten
            && let Some(ring) = rings.remove(&old)
        {
            *ring_bytes_total -= ring.bytes;
            if let Some((last, _)) = ring.events.back() {
                *floor = (*floor).max(last.seq);
            }
        }
        if counted {
            self.counters.published();
        }
        // No receivers is fine: nobody is subscribed.
        let _ = self.live.send(event.clone());
        event
    }

    /// Starts a subscription. The start and the live receiver are taken under
    /// the publishing lock, so nothing is missed or seen twice between them.
    pub fn subscribe(
        &self,
        filter: &Filter,
        resume_after: Option<u64>,
        resume_instance: &str,
    ) -> (Start, broadcast::Receiver<Arc<Published>>) {
        let state = self.lock();
        let rx = self.live.subscribe();
        let Some(after) = resume_after else {
            return (
                Start::Snapshot(Box::new(self.snapshot_event(&state, filter))),
                rx,
            );
        };
        let rings = match self.replayable(&state, filter, after, resume_instance) {
            Ok(rings) => rings,
            Err(why) => {
                let (gap, snapshot) = self.lost(&state, filter, after, why);
                return (Start::Resync { gap, snapshot }, rx);
            }
        };
        // A ring is in seq order: only its events after the cursor are
        // looked at, and the sort waits until the lock is released, so a
        // resume from far back does not hold up every publisher.
        let mut missed: Vec<Arc<Published>> = rings
            .iter()
            .flat_map(|r| {
                let from = r.events.partition_point(|(e, _)| e.seq <= after);
                r.events.range(from..).map(|(e, _)| e)
            })
            .filter(|e| filter.admits(e))
            .cloned()
            .collect();
        drop(state);
        missed.sort_unstable_by_key(|e| e.seq);
        (Start::Replay(missed), rx)
    }

    /// The rings a resume after `after` reads, when they still hold
    /// everything after it; else why not.
    fn replayable<'a>(
        &self,
        state: &'a BusState,
        filter: &Filter,
        after: u64,
        resume_instance: &str,
    ) -> Result<Vec<&'a Ring>, &'static str> {
        if !(resume_instance.is_empty() || resume_instance == self.instance_id) {
            return Err("the cursor is from another daemon instance");
        }
        if after > state.last_seq {
            return Err("the cursor is ahead of this daemon's events");
        }
        let rings: Vec<&Ring> = state
            .rings
            .iter()
            .filter(|(sid, _)| filter.admits_session(sid))
            .map(|(_, ring)| ring)
            .collect();
        if after < state.floor || rings.iter().any(|r| r.evicted_through > after) {
            return Err("resume point no longer held");
        }
        Ok(rings)
    }

    /// What a resume after `after` lost, and a snapshot to go on from.
    fn lost(
        &self,
        state: &BusState,
        filter: &Filter,
        after: u64,
        why: &str,
    ) -> (Box<Event>, Box<Event>) {
        // A cursor this daemon's numbering never reached says nothing of
        // what the client has seen: all of it may be news.
        let from = if after < state.last_seq { after + 1 } else { 1 };
        let gap = self.gap_event(from, state.last_seq, why);
        let snapshot = self.snapshot_event(state, filter);
        (Box::new(gap), Box::new(snapshot))
    }

    /// The next events after `after` from the rings, in seq order, for a
    /// stream that resumes and takes them as its client reads: about
    /// `budget` encoded bytes of them (at least one) from at most
    /// `max_events` looked at, or all that are left together with the live
    /// receiver that follows them. Under the
    /// publishing lock, so nothing is missed or seen twice when the stream
    /// goes live; and the stream holds a cursor, not the events, while its
    /// client reads.
    pub fn catch_up(
        &self,
        filter: &Filter,
        after: u64,
        resume_instance: &str,
        budget: usize,
        max_events: usize,
    ) -> CatchUp {
        let state = self.lock();
        let rings = match self.replayable(&state, filter, after, resume_instance) {
            Ok(rings) => rings,
            Err(why) => {
                let (gap, snapshot) = self.lost(&state, filter, after, why);
                let rx = self.live.subscribe();
                return CatchUp::Lost { gap, snapshot, rx };
            }
        };
        // Merge the rings' events after the cursor by seq.
        let mut heads: BinaryHeap<Reverse<(u64, usize, usize)>> = BinaryHeap::new();
        for (i, ring) in rings.iter().enumerate() {
            let from = ring.events.partition_point(|(e, _)| e.seq <= after);
            if let Some((event, _)) = ring.events.get(from) {
                heads.push(Reverse((event.seq, i, from)));
            }
        }
        let (mut events, mut bytes) = (Vec::new(), 0);
        let mut looked = 0;
        while let Some(Reverse((seq, i, at))) = heads.pop() {
            let event = &rings[i].events[at].0;
            looked += 1;
            if filter.admits(event) {
                bytes += event.encoded_len();
                events.push(event.clone());
            }
            if let Some((next, _)) = rings[i].events.get(at + 1) {
                heads.push(Reverse((next.seq, i, at + 1)));
            }
            // Events the filter passes over count too, so one call does not
            // walk a whole ring of another channel's events.
            if (bytes >= budget || looked >= max_events) && !heads.is_empty() {
                return CatchUp::More {
                    events,
                    through: seq,
                };
            }
        }
        let rx = self.live.subscribe();
        CatchUp::Caught { events, rx }
    }

    /// After a subscriber lagged: the gap since its cursor, a fresh snapshot and
    /// a new receiver, all at one instant.
    pub fn resync(
        &self,
        filter: &Filter,
        cursor: u64,
    ) -> (Event, Event, broadcast::Receiver<Arc<Published>>) {
        let state = self.lock();
        let rx = self.live.subscribe();
        let gap = self.gap_event(cursor + 1, state.last_seq, "subscriber too slow");
        (gap, self.snapshot_event(&state, filter), rx)
    }

    /// Replaces the breakpoints in the view (start-up).
    pub fn seed_breakpoints(&self, breakpoints: Vec<Breakpoint>) {
        self.lock().view.seed_breakpoints(breakpoints);
    }

    /// Runs `f` on the current state view.
    pub fn with_view<R>(&self, f: impl FnOnce(&StateView) -> R) -> R {
        f(&self.lock().view)
    }

    /// The highest seq assigned so far.
    pub fn last_seq(&self) -> u64 {
        self.lock().last_seq
    }

    /// Bytes of events published so far: a receiver whose last event has
    /// [`Published::offset`] `o` is this less `o` behind.
    pub fn published_bytes(&self) -> u64 {
        self.published_bytes.load(Ordering::Relaxed)
    }

    fn snapshot_event(&self, state: &BusState, filter: &Filter) -> Event {
        let snapshot = state
            .view
            .snapshot(filter, state.last_seq, &self.instance_id);
        Event {
            seq: 0,
            session_id: String::new(),
            time: Some(now_timestamp()),
            payload: Some(Payload::Snapshot(snapshot)),
        }
    }

    fn gap_event(&self, from_seq: u64, to_seq: u64, reason: &str) -> Event {
        Event {
            seq: 0,
            session_id: String::new(),
            time: Some(now_timestamp()),
            payload: Some(Payload::Gap(Gap {
                from_seq,
                to_seq,
                reason: reason.to_owned(),
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use stepd_proto::v1::{Notification, Watch};

    use super::*;

    fn note(bus: &EventBus, sid: &str) -> u64 {
        bus.publish(sid, Payload::Notification(Notification::default()))
            .seq
    }

    fn message(bus: &EventBus, sid: &str, bytes: usize) -> u64 {
        bus.publish(
            sid,
            Payload::Notification(Notification {
                message: "x".repeat(bytes),
                ..Default::default()
            }),
        )
        .seq
    }

    #[test]
    fn all_rings_together_are_bounded_and_a_flood_pays_for_itself() {
        let bus = EventBus::new("i".into(), 1, 16, 100)
            .with_ring_bytes(1 << 20)
            .with_ring_bytes_total(20_000);
        let quiet = message(&bus, "quiet", 3_000);
        for _ in 0..50 {
            message(&bus, "flood", 3_000);
        }
        let state = bus.lock();
        assert!(
            state.ring_bytes_total <= 20_000,
            "{}",
            state.ring_bytes_total
        );
        let sum: usize = state.rings.values().map(|r| r.bytes).sum();
        assert_eq!(sum, state.ring_bytes_total);
        // The quiet session keeps its event; the flood lost its own oldest.
        assert_eq!(state.rings["quiet"].events[0].0.seq, quiet);
        assert_eq!(state.rings["quiet"].evicted_through, 0);
        assert!(state.rings["flood"].evicted_through > quiet);
        drop(state);
        // A new session whose first event does not fit takes from the largest.
        message(&bus, "third", 3_000);
        let state = bus.lock();
        assert!(state.ring_bytes_total <= 20_000);
        assert_eq!(state.rings["third"].events.len(), 1);
        assert_eq!(state.rings["quiet"].events.len(), 1);
    }

    #[test]
    fn a_ring_counts_the_memory_its_events_hold() {
        // An event is as large as its largest payload; the large ones are
        // boxed, so a small probe report stays small in the rings.
        assert!(
            std::mem::size_of::<Event>() <= 320,
            "{}",
            std::mem::size_of::<Event>()
        );
        let sample = EventBus::new("i".into(), 1, 16, 1_000);
        let one = footprint(&sample.publish("a", Payload::Notification(Notification::default())));
        assert!(one > std::mem::size_of::<Event>());
        let bus = EventBus::new("i".into(), 1, 16, 1_000).with_ring_bytes(10 * one + one / 2);
        for _ in 0..100 {
            note(&bus, "a");
        }
        let state = bus.lock();
        let ring = &state.rings["a"];
        // Ten fit by memory, though a hundred would fit by encoded size.
        assert_eq!(ring.events.len(), 10);
        let held: usize = ring
            .events
            .iter()
            .map(|(e, bytes)| {
                assert_eq!(*bytes, footprint(e));
                bytes
            })
            .sum();
        assert_eq!(held, ring.bytes);
        assert_eq!(held, state.ring_bytes_total);
    }

    #[test]
    fn rings_are_bounded_in_bytes_too() {
        let bus = EventBus::new("i".into(), 1, 16, 100).with_ring_bytes(10_000);
        let big = |bus: &EventBus| {
            bus.publish(
                "a",
                Payload::Notification(Notification {
                    message: "x".repeat(3_000),
                    ..Default::default()
                }),
            )
            .seq
        };
        let first = big(&bus);
        let second = big(&bus);
        for _ in 0..3 {
            big(&bus);
        }
        let state = bus.lock();
        let ring = &state.rings["a"];
        assert_eq!(ring.events.len(), 3, "three 3 KB events fit 10 KB");
        assert!(ring.bytes <= 10_000);
        assert_eq!(ring.evicted_through, second);
        drop(state);
        // A cursor before the evicted events resynchronises; one after replays.
        let (start, _rx) = bus.subscribe(&Filter::default(), Some(first), "i");
        assert!(matches!(start, Start::Resync { .. }));
        let (start, _rx) = bus.subscribe(&Filter::default(), Some(second), "i");
        assert!(matches!(start, Start::Replay(ref m) if m.len() == 3));
        // An event larger than the whole ring is not kept at all.
        let huge = bus
            .publish(
                "a",
                Payload::Notification(Notification {
                    message: "x".repeat(20_000),
                    ..Default::default()
                }),
            )
            .seq;
        let state = bus.lock();
        assert!(state.rings["a"].events.is_empty());
        assert_eq!(state.rings["a"].evicted_through, huge);
    }

    #[test]
    fn catching_up_pages_the_rings_in_seq_order_then_goes_live() {
        let bus = EventBus::new("i".into(), 1, 64, 100);
        let first = note(&bus, "a");
        let mut expected = Vec::new();
        for i in 0..30 {
            let sid = ["a", "b", ""][i % 3];
            expected.push(
                bus.publish(sid, Payload::Notification(Notification::default()))
                    .seq,
            );
        }
        let all = Filter::default();
        let (mut seen, mut after) = (Vec::new(), first);
        let rx = loop {
            // A budget of one event's bytes: one event a call.
            match bus.catch_up(&all, after, "i", 1, 100) {
                CatchUp::More { events, through } => {
                    assert_eq!(events.len(), 1);
                    seen.extend(events.iter().map(|e| e.seq));
                    after = through;
                }
                CatchUp::Caught { events, rx } => {
                    seen.extend(events.iter().map(|e| e.seq));
                    break rx;
                }
                CatchUp::Lost { .. } => panic!("everything is held"),
            }
        };
        assert_eq!(seen, expected, "every event once, in seq order");
        let mut rx = rx;
        let live = note(&bus, "b");
        assert_eq!(
            rx.try_recv().unwrap().seq,
            live,
            "then live, nothing between"
        );
        // Events the filter passes over count toward what a call looks at.
        let only_a = Filter::from_watch(&Watch {
            session_ids: vec!["a".into()],
            ..Default::default()
        });
        let CatchUp::More { events, through } = bus.catch_up(&only_a, first, "i", usize::MAX, 4)
        else {
            panic!("more after four looked at")
        };
        // Only the rings the filter admits are looked at: a's and the daemon's.
        let admitted: Vec<u64> = expected
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 3 != 1)
            .map(|(_, seq)| *seq)
            .collect();
        assert_eq!(through, admitted[3]);
        assert_eq!(
            events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            admitted[..4]
        );
        // An evicted cursor, or another instance's, is lost.
        assert!(matches!(
            bus.catch_up(&all, first, "other", 1, 100),
            CatchUp::Lost { .. }
        ));
    }

    #[test]
    fn replays_exactly_what_was_missed() {
        let bus = EventBus::new("i".into(), 100, 16, 8);
        let all = Filter::default();
        let a1 = note(&bus, "a");
        let b1 = note(&bus, "b");
        let d1 = note(&bus, "");
        assert_eq!((a1, b1, d1), (100, 101, 102));
        let (start, _rx) = bus.subscribe(&all, Some(a1), "i");
        let Start::Replay(missed) = start else {
            panic!("expected a replay")
        };
        assert_eq!(missed.iter().map(|e| e.seq).collect::<Vec<_>>(), [101, 102]);

        let only_a = Filter::from_watch(&Watch {
            session_ids: vec!["a".into()],
            ..Default::default()
        });
        let (start, _rx) = bus.subscribe(&only_a, Some(a1), "i");
        let Start::Replay(missed) = start else {
            panic!("expected a replay")
        };
        assert_eq!(missed.iter().map(|e| e.seq).collect::<Vec<_>>(), [102]);
    }

    #[test]
    fn evicted_or_foreign_cursors_resync() {
        let bus = EventBus::new("i".into(), 1, 16, 2);
        let first = note(&bus, "a");
        for _ in 0..3 {
            note(&bus, "a");
        }
        // The ring holds 3 and 4: a cursor at 1 missed 2, which is gone.
        let (start, _rx) = bus.subscribe(&Filter::default(), Some(first), "i");
        assert!(matches!(start, Start::Resync { .. }));
        let (start, _rx) = bus.subscribe(&Filter::default(), Some(2), "i");
        assert!(matches!(start, Start::Replay(ref m) if m.len() == 2));
        let (start, _rx) = bus.subscribe(&Filter::default(), Some(2), "other-instance");
        assert!(matches!(start, Start::Resync { .. }));
        let (start, _rx) = bus.subscribe(&Filter::default(), Some(99), "i");
        assert!(matches!(start, Start::Resync { .. }));
        for ahead in [5, u64::MAX] {
            let (start, _rx) = bus.subscribe(&Filter::default(), Some(ahead), "i");
            let Start::Resync { gap, .. } = start else {
                panic!("a cursor ahead of the daemon resyncs")
            };
            assert!(
                matches!(gap.payload, Some(Payload::Gap(ref g)) if g.from_seq == 1 && g.to_seq == 4),
                "{gap:?}"
            );
        }
    }
}
