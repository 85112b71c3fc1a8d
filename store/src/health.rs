//! Whether the database is known to be down. A write that finds it
//! unreachable marks it down; from then on writes are refused at once
//! instead of each waiting out its own timeouts, and a probe (`SELECT 1` on
//! a fresh connection, backing off) marks it up again as soon as it
//! answers. A write cut short by its deadline only has the probe look: a
//! slow database is not a down one.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use super::Pool;

/// The probe's first wait between attempts; it doubles up to `PROBE_MAX`
/// while the database stays down.
const PROBE_FIRST: Duration = Duration::from_millis(250);
const PROBE_MAX: Duration = Duration::from_secs(4);

/// How long one probe waits for the database to connect and answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The database is down: since when, and why.
#[derive(Clone, Debug)]
pub struct Down {
    pub since: SystemTime,
    pub cause: Arc<str>,
}

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the database has been unreachable since {} ({}); writes are refused until it answers again",
            humantime::format_rfc3339_seconds(self.since),
            self.cause
        )
    }
}

/// The store's view of its database.
#[derive(Debug)]
pub(super) struct Health {
    pool: Pool,
    place: Arc<str>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    down: Option<Down>,
    /// Whether the probe task runs.
    probing: bool,
}

impl Health {
    pub(super) fn new(pool: Pool, place: Arc<str>) -> Arc<Self> {
        Arc::new(Self {
            pool,
            place,
            state: Mutex::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the database is known to be down, and since when.
    pub(super) fn down(&self) -> Option<Down> {
        self.state().down.clone()
    }

    /// A write found the database unreachable: it is down from now on,
    /// until the probe finds it answering.
    pub(super) fn lost(self: &Arc<Self>, cause: &dyn std::fmt::Display) {
        let mut state = self.state();
        self.mark_down(&mut state, cause);
        self.probe(state);
    }

    /// A write ran out of time waiting for the database: the probe looks
    /// whether it answers, and marks it down if not.
    pub(super) fn doubt(self: &Arc<Self>) {
        let state = self.state();
        self.probe(state);
    }

    /// Takes a probe's answer; true when probing is over (the database
    /// answers, or the store is closed).
    fn settle(&self, answer: Result<(), String>) -> bool {
        let mut state = self.state();
        match answer {
            Ok(()) => {
                if let Some(down) = state.down.take() {
                    tracing::info!(
                        store = %self.place,
                        down_for_s = down.since.elapsed().unwrap_or_default().as_secs(),
                        "the database answers again; writes are accepted"
                    );
                }
            }
            Err(_) if self.pool.is_closed() => {}
            Err(cause) => {
                self.mark_down(&mut state, &cause);
                return false;
            }
        }
        state.probing = false;
        true
    }

    /// Marks the database down, unless it is already.
    fn mark_down(&self, state: &mut State, cause: &dyn std::fmt::Display) {
        if state.down.is_some() {
            return;
        }
        let down = Down {
            since: SystemTime::now(),
            cause: cause.to_string().into(),
        };
        tracing::warn!(
            store = %self.place,
            error = %down.cause,
            "the database is unreachable; writes are refused at once until it answers again"
        );
        state.down = Some(down);
    }

    /// Starts the probe unless it runs.
    fn probe(self: &Arc<Self>, mut state: std::sync::MutexGuard<'_, State>) {
        if state.probing {
            return;
        }
        state.probing = true;
        tokio::spawn(self.clone().probing());
    }

    /// Probes until the database answers (or the store closes).
    async fn probing(self: Arc<Self>) {
        let mut wait = PROBE_FIRST;
        loop {
            let answer = match tokio::time::timeout(PROBE_TIMEOUT, self.pool.answers()).await {
                Ok(answer) => answer.map_err(|err| err.to_string()),
                Err(_) => Err(format!(
                    "no answer to SELECT 1 within {} s",
                    PROBE_TIMEOUT.as_secs()
                )),
            };
            if self.settle(answer) {
                return;
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(PROBE_MAX);
        }
    }
}
