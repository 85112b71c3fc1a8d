//! The daemon's counts and their export as OpenTelemetry metrics.
//!
//! [`Counters`] are the few numbers nothing else keeps (events published
//! and dropped, gaps sent, commands by kind): atomics bumped where they
//! happen. [`Counts`] is everything an operator asks about at one instant,
//! read from those and from the state the daemon already keeps; `GetStatus`
//! answers it and the observable instruments read it at each export, so the
//! two can never disagree. Durations (holds, DAP requests) are histograms
//! recorded only when metrics are exported: with export off every entry
//! point here returns after one check of a `OnceLock`.

use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use opentelemetry::{
    KeyValue,
    metrics::{Histogram, Meter},
};
use stepd_proto::v1::{CommandKind, SessionKind, SessionState};

/// One more than the highest `CommandKind` value.
const COMMAND_KINDS: usize = CommandKind::Jump as usize + 1;

/// What the daemon counts as it goes; one per daemon, held by the event bus
/// (everything that counts already holds the bus).
#[derive(Debug)]
pub struct Counters {
    published: AtomicU64,
    dropped: AtomicU64,
    gaps: AtomicU64,
    commands: [AtomicU64; COMMAND_KINDS],
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            published: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            gaps: AtomicU64::new(0),
            commands: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Counters {
    /// An event was published (numbered).
    pub fn published(&self) {
        self.published.fetch_add(1, Ordering::Relaxed);
    }

    /// A subscriber too slow to take them lost `n` numbered events (the span
    /// of the gap that resynchronises it).
    pub fn dropped(&self, n: u64) {
        self.dropped.fetch_add(n, Ordering::Relaxed);
    }

    /// A `gap` event was sent to a subscriber.
    pub fn gap_sent(&self) {
        self.gaps.fetch_add(1, Ordering::Relaxed);
    }

    /// A command was handed to a session.
    pub fn command(&self, kind: CommandKind) {
        if let Some(n) = self.commands.get(kind as usize) {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn load(n: &AtomicU64) -> u64 {
        n.load(Ordering::Relaxed)
    }
}

/// Sessions of one kind in one state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionCount {
    /// DAP or probe.
    pub kind: SessionKind,
    /// Where they are in their life.
    pub state: SessionState,
    /// How many.
    pub count: u64,
}

/// The daemon's counts at one instant: what `GetStatus` reports and the
/// metrics export.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Sessions not ended, by kind and state (only the pairs that occur).
    pub sessions: Vec<SessionCount>,
    /// Probe sessions not ended: connected probes.
    pub probes: u64,
    /// Pending pauses.
    pub pending_pauses: u64,
    /// Open Subscribe streams.
    pub subscribers: u64,
    /// Events published since the daemon started.
    pub events_published: u64,
    /// Events lost by subscribers too slow to take them: the span of each
    /// gap that resynchronised one.
    pub events_dropped: u64,
    /// `gap` events sent.
    pub gaps_sent: u64,
    /// Commands handed to sessions, by kind (only kinds given at least once).
    pub commands: Vec<(CommandKind, u64)>,
}

impl Counts {
    /// The counts of `counters`, the rest left for the caller to fill.
    pub fn of(counters: &Counters) -> Self {
        let commands = counters
            .commands
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                let n = Counters::load(n);
                let kind = CommandKind::try_from(i32::try_from(i).ok()?).ok()?;
                (n > 0).then_some((kind, n))
            })
            .collect();
        Self {
            events_published: Counters::load(&counters.published),
            events_dropped: Counters::load(&counters.dropped),
            gaps_sent: Counters::load(&counters.gaps),
            commands,
            ..Self::default()
        }
    }

    /// Counts sessions of `kind` in `state`.
    pub fn add_session(&mut self, kind: SessionKind, state: SessionState) {
        if kind == SessionKind::Probe {
            self.probes += 1;
        }
        match self
            .sessions
            .iter_mut()
            .find(|c| c.kind == kind && c.state == state)
        {
            Some(c) => c.count += 1,
            None => self.sessions.push(SessionCount {
                kind,
                state,
                count: 1,
            }),
        }
    }
}

// ----- export ---------------------------------------------------------------

/// The instruments recorded synchronously; set once, when export is on.
struct Recorders {
    meter: Meter,
    hold: Histogram<f64>,
    dap_request: Histogram<f64>,
}

static RECORDERS: OnceLock<Recorders> = OnceLock::new();

/// Whether metrics are exported. One atomic load.
#[inline]
pub fn enabled() -> bool {
    RECORDERS.get().is_some()
}

/// Hold durations, seconds: a step is milliseconds, a person minutes.
const HOLD_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// DAP request durations, seconds.
const DAP_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Installs the synchronous instruments on `meter` (telemetry's init, once).
pub fn install(meter: Meter) {
    let hold = meter
        .f64_histogram("stepd.pause.hold.duration")
        .with_unit("s")
        .with_description("How long pauses were held, from the stop to the resolution")
        .with_boundaries(HOLD_BUCKETS.to_vec())
        .build();
    let dap_request = meter
        .f64_histogram("stepd.dap.request.duration")
        .with_unit("s")
        .with_description("DAP requests to the adapter, from sending to the response")
        .with_boundaries(DAP_BUCKETS.to_vec())
        .build();
    let _ = RECORDERS.set(Recorders {
        meter,
        hold,
        dap_request,
    });
}

/// Reports one instrument's values out of the counts.
type Reader = fn(&Counts, &mut dyn FnMut(u64, &[KeyValue]));

/// `stepd.replica`: the instance id of the daemon reporting, on every
/// point, so that replicas' series stay apart and their sum is the
/// cluster's.
static REPLICA: OnceLock<KeyValue> = OnceLock::new();

/// `attributes` and the replica's.
fn with_replica(attributes: &[KeyValue]) -> Vec<KeyValue> {
    let mut all = attributes.to_vec();
    all.extend(REPLICA.get().cloned());
    all
}

/// Exports what `counts` reads at each collection, as observable
/// instruments, each point naming `replica`; does nothing with export off.
/// Call once per daemon, with counts of what this daemon itself runs.
pub fn observe(replica: &str, counts: impl Fn() -> Counts + Send + Sync + 'static) {
    let Some(recorders) = RECORDERS.get() else {
        return;
    };
    let _ = REPLICA.set(KeyValue::new("stepd.replica", replica.to_owned()));
    let meter = &recorders.meter;
    let counts = Arc::new(counts);
    let read = |f: Reader| {
        let counts = counts.clone();
        move |observe: &mut dyn FnMut(u64, &[KeyValue])| {
            f(&counts(), &mut |v, a| observe(v, &with_replica(a)));
        }
    };
    let gauge = |name: &'static str, unit: &'static str, about: &'static str, f: Reader| {
        let read = read(f);
        meter
            .u64_observable_gauge(name)
            .with_unit(unit)
            .with_description(about)
            .with_callback(move |o| read(&mut |v, a| o.observe(v, a)))
            .build();
    };
    let counter = |name: &'static str, unit: &'static str, about: &'static str, f: Reader| {
        let read = read(f);
        meter
            .u64_observable_counter(name)
            .with_unit(unit)
            .with_description(about)
            .with_callback(move |o| read(&mut |v, a| o.observe(v, a)))
            .build();
    };
    gauge(
        "stepd.sessions",
        "{session}",
        "Sessions not ended, by kind and state",
        |c, o| {
            for s in &c.sessions {
                o(
                    s.count,
                    &[
                        KeyValue::new("stepd.session.kind", short(s.kind.as_str_name())),
                        KeyValue::new("stepd.session.state", short(s.state.as_str_name())),
                    ],
                );
            }
        },
    );
    gauge(
        "stepd.probes.connected",
        "{probe}",
        "Probes connected",
        |c, o| o(c.probes, &[]),
    );
    gauge(
        "stepd.pauses.pending",
        "{pause}",
        "Pauses waiting for an answer",
        |c, o| o(c.pending_pauses, &[]),
    );
    gauge(
        "stepd.subscribers",
        "{stream}",
        "Open Subscribe streams",
        |c, o| o(c.subscribers, &[]),
    );
    counter(
        "stepd.events.published",
        "{event}",
        "Events published",
        |c, o| o(c.events_published, &[]),
    );
    counter(
        "stepd.events.dropped",
        "{event}",
        "Events lost by Subscribe streams too slow to take them (the span of each resynchronising gap)",
        |c, o| o(c.events_dropped, &[]),
    );
    counter(
        "stepd.events.gaps",
        "{gap}",
        "Gap events sent to subscribers",
        |c, o| o(c.gaps_sent, &[]),
    );
    counter(
        "stepd.commands",
        "{command}",
        "Commands handed to sessions, by kind",
        |c, o| {
            for (kind, n) in &c.commands {
                o(
                    *n,
                    &[KeyValue::new(
                        "stepd.command.kind",
                        short(kind.as_str_name()),
                    )],
                );
            }
        },
    );
}

fn short(name: &'static str) -> &'static str {
    stepd_proto::short_name(name)
}

/// A pause was resolved after being held `held`.
pub fn hold_ended(held: Duration, reason: &'static str, command: CommandKind) {
    if let Some(r) = RECORDERS.get() {
        r.hold.record(
            held.as_secs_f64(),
            &with_replica(&[
                KeyValue::new("stepd.pause.reason", short(reason)),
                KeyValue::new("stepd.pause.command", short(command.as_str_name())),
            ]),
        );
    }
}

/// A DAP request was answered (or given up on) after `took`.
pub fn dap_request(adapter: &'static str, command: &str, took: Duration) {
    if let Some(r) = RECORDERS.get() {
        r.dap_request.record(
            took.as_secs_f64(),
            &with_replica(&[
                KeyValue::new("stepd.adapter", adapter),
                KeyValue::new("stepd.dap.command", command.to_owned()),
            ]),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_the_counters_and_group_sessions() {
        let counters = Counters::default();
        counters.published();
        counters.published();
        counters.dropped(5);
        counters.gap_sent();
        counters.command(CommandKind::Next);
        counters.command(CommandKind::Next);
        counters.command(CommandKind::Inject);
        let mut counts = Counts::of(&counters);
        assert_eq!(
            (
                counts.events_published,
                counts.events_dropped,
                counts.gaps_sent
            ),
            (2, 5, 1)
        );
        assert_eq!(
            counts.commands,
            vec![(CommandKind::Next, 2), (CommandKind::Inject, 1)]
        );
        counts.add_session(SessionKind::Probe, SessionState::Running);
        counts.add_session(SessionKind::Probe, SessionState::Running);
        counts.add_session(SessionKind::Dap, SessionState::Stopped);
        assert_eq!(counts.probes, 2);
        assert_eq!(
            counts.sessions,
            vec![
                SessionCount {
                    kind: SessionKind::Probe,
                    state: SessionState::Running,
                    count: 2
                },
                SessionCount {
                    kind: SessionKind::Dap,
                    state: SessionState::Stopped,
                    count: 1
                },
            ]
        );
    }
}
