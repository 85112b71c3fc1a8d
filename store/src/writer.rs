//! The one task that writes: writes that arrive together are committed in
//! one transaction, so they share one sync to disk (group commit), and each
//! is acknowledged only after that commit succeeded.
//!
//! A batch in which any statement fails is rolled back whole and its writes
//! are retried each in a transaction of its own, so one write's error (a
//! full disk, a constraint) is that write's alone: SQLite may roll back a
//! whole transaction by itself on such errors, and the writes after it
//! would then run outside any transaction.
//!
//! Every write has a deadline (`within.rs`); the rule (decision 136):
//! the writer claims a write just before it sends its commit, and only
//! before the write's cutoff (its deadline less a margin); its caller
//! abandons it when it leaves or when the cutoff comes first (`Queued`).
//! An abandoned write is never committed: it is dropped from the queue
//! unrun, or its transaction rolled back, and its caller is told it failed.
//! The database refuses a commit that begins after the cutoff
//! (`commit_guard.rs`), so one held up in transit — a frozen
//! server, a lost packet — cannot land after the caller was told it
//! failed; the caller of a claimed write waits for the commit's answer,
//! until its deadline. Waiting for a connection or for `BEGIN` is bounded
//! by `ANSWER` too: a database that does not answer those is down
//! (`health.rs`), and later writes are refused at once.

use std::sync::Arc;

use sqlx::pool::PoolConnection;
use tokio::{
    sync::{mpsc, oneshot},
    time::Instant,
};

use super::{
    ANSWER, StoredBreakpoint, Within, backend::Backend, failure::Failure, health::Health,
    statement::Statement,
};

/// The most writes one transaction takes; more wait for the next.
const BATCH: usize = 64;

/// Writes waiting for the writer; callers wait when it is this far behind.
pub(super) const QUEUE: usize = 1024;

/// What a write gets back.
pub(super) type Outcome = Result<Vec<StoredBreakpoint>, Failure>;

/// One write: its statements, its deadline, and where its rows (or
/// error) go.
pub(super) struct Job {
    pub statements: Vec<Statement>,
    pub within: Within,
    pub reply: oneshot::Sender<Outcome>,
}

/// Why a write must not be tried (now), if it must not.
pub(super) fn refusal(within: &Within, health: &Health) -> Option<Failure> {
    expired(within).or_else(|| health.down().map(Failure::Down))
}

/// Why a write must not be committed, if its time ran out or its caller
/// abandoned it.
fn expired(within: &Within) -> Option<Failure> {
    if Instant::now() >= within.cutoff() {
        Some(Failure::TooLate)
    } else if within.abandoned() {
        Some(Failure::CallerGone)
    } else {
        None
    }
}

/// Claims every write for the commit about to be sent, or none: a write
/// its caller abandoned (or whose cutoff passed) while its statements ran
/// is not committed, and the others are handed back to be tried again.
fn claim_all(within: &[Within]) -> Result<(), Failure> {
    for (i, w) in within.iter().enumerate() {
        if let Some(failure) = expired(w).or_else(|| (!w.claim()).then_some(Failure::CallerGone)) {
            within[..i].iter().for_each(Within::release);
            return Err(failure);
        }
    }
    Ok(())
}

/// Runs until every sender is gone, then returns.
pub(super) async fn run<B: Backend>(
    pool: sqlx::Pool<B>,
    mut jobs: mpsc::Receiver<Job>,
    health: Arc<Health>,
) {
    // Closing the pool waits for every connection to come back, the
    // writer's own included.
    let closed = pool.close_event();
    tokio::pin!(closed);
    let mut writer = Connection::new(pool, health.clone());
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        tokio::select! {
            // A closing pool takes no more writes, as when the writer took a
            // connection for each.
            biased;
            () = &mut closed, if writer.conn.is_some() => {
                writer.conn = None;
                continue;
            }
            received = jobs.recv_many(&mut batch, BATCH) => if received == 0 {
                return;
            },
        }
        // Writes whose caller left, or whose time ran out while they
        // waited, are dropped unrun; while the database is down none is
        // tried.
        let mut live: Vec<Job> = Vec::with_capacity(batch.len());
        for job in batch.drain(..) {
            match refusal(&job.within, &health) {
                Some(failure) => {
                    let _ = job.reply.send(Err(failure));
                }
                None => live.push(job),
            }
        }
        if live.len() <= 1 {
            if let Some(job) = live.pop() {
                let outcome = writer
                    .transaction(vec![job.statements], std::slice::from_ref(&job.within))
                    .await;
                let _ = job.reply.send(outcome.map(|mut rows| rows.remove(0)));
            }
            continue;
        }
        let mut statements = Vec::with_capacity(live.len());
        let mut withins = Vec::with_capacity(live.len());
        let mut replies = Vec::with_capacity(live.len());
        for job in live {
            statements.push(job.statements);
            withins.push(job.within);
            replies.push(job.reply);
        }
        // Statements are consumed by running them, so a batch that fails is
        // retried from copies taken before it ran.
        let copies = statements.clone();
        match writer.transaction(statements, &withins).await {
            Ok(rows) => {
                for (reply, rows) in replies.into_iter().zip(rows) {
                    let _ = reply.send(Ok(rows));
                }
            }
            Err(failure) if failure.retry_alone() => {
                for ((reply, statements), within) in replies.into_iter().zip(copies).zip(withins) {
                    let outcome = match refusal(&within, &health) {
                        Some(failure) => Err(failure),
                        None => writer
                            .transaction(vec![statements], std::slice::from_ref(&within))
                            .await
                            .map(|mut rows| rows.remove(0)),
                    };
                    let _ = reply.send(outcome);
                }
            }
            // The database is down, or the commit's outcome is unknown:
            // trying each write again would wait out the outage once more,
            // or make twice a write that may have been made.
            Err(failure) => {
                for reply in replies {
                    let _ = reply.send(Err(failure.clone()));
                }
            }
        }
    }
}

impl Failure {
    /// Whether the writes of a batch that failed so are tried again each
    /// alone: the failure may have been one write's (its error, its
    /// deadline, its caller leaving), and nothing of the batch was kept.
    fn retry_alone(&self) -> bool {
        matches!(self, Self::Refused(_) | Self::TooLate | Self::CallerGone)
    }
}

/// The writer's connection, kept from one transaction to the next. A
/// SQLite connection drops its whole page cache when another connection
/// wrote since its last transaction, so a writer taking whichever pooled
/// connection was idle read back every index page it touched, each time;
/// its own connection keeps them.
struct Connection<B: Backend> {
    pool: sqlx::Pool<B>,
    conn: Option<Kept<B>>,
    health: Arc<Health>,
}

/// A connection of the writer's, readied for guarded commits
/// (`commit_guard.rs`).
struct Kept<B: Backend> {
    conn: PoolConnection<B>,
    guard: B::Guard,
}

impl<B: Backend> Connection<B> {
    fn new(pool: sqlx::Pool<B>, health: Arc<Health>) -> Self {
        Self {
            pool,
            conn: None,
            health,
        }
    }

    /// Runs each write's statements in one transaction (`Backend::BEGIN` …
    /// `COMMIT`) and returns each write's rows, only once the commit
    /// succeeded; `within` are the writes' deadlines, and the earliest
    /// bounds the transaction. A connection whose transaction failed is
    /// closed rather than kept: after a failed `COMMIT` SQLite has rolled
    /// back by itself and the connection's transaction state is not to be
    /// trusted, and one left mid-statement by a timeout may still be busy.
    async fn transaction(
        &mut self,
        writes: Vec<Vec<Statement>>,
        within: &[Within],
    ) -> Result<Vec<Vec<StoredBreakpoint>>, Failure> {
        let cutoff = within.iter().map(Within::cutoff).min();
        let deadline = within.iter().map(Within::deadline).min();
        let (Some(cutoff), Some(deadline)) = (cutoff, deadline) else {
            return Ok(Vec::new());
        };
        let (Kept { mut conn, guard }, begun) = self.begin(cutoff).await?;
        let result = async {
            let mut all = Vec::with_capacity(writes.len());
            for statements in writes {
                let mut rows = Vec::new();
                for statement in statements {
                    let run = B::run::<StoredBreakpoint>(&mut conn, statement);
                    rows.extend(self.wait("a statement", cutoff, false, run).await?);
                }
                all.push(rows);
            }
            let guarded = B::commit_before(&mut conn, &guard, cutoff, begun);
            self.wait("the commit's deadline", cutoff, false, guarded)
                .await?;
            claim_all(within)?;
            let committed =
                match tokio::time::timeout_at(deadline, B::execute(&mut conn, "COMMIT")).await {
                    Ok(Ok(())) => return Ok(all),
                    Ok(Err(err)) if B::refused_late(&err) => Failure::TooLate,
                    Ok(Err(err)) => Failure::of(err),
                    // Its callers were not told it failed before their
                    // deadline: they wait for this answer.
                    Err(_) => {
                        self.health.doubt();
                        return Err(Failure::Unconfirmed);
                    }
                };
            // Refused, so nothing was kept: the writes may be tried again.
            within.iter().for_each(Within::release);
            Err(committed)
        }
        .await;
        match &result {
            Ok(_) => self.conn = Some(Kept { conn, guard }),
            Err(failure) => {
                // Closed when dropped, rolling back whatever is open; not
                // waited for, as a server that stopped answering would
                // hold the writer.
                conn.close_on_drop();
                drop(conn);
                if failure.is_outage() {
                    self.health.lost(failure);
                }
            }
        }
        result
    }

    /// A connection with a transaction begun, and when `BEGIN` answered.
    /// The kept one is not checked by the pool as a connection taken from
    /// it is, so one that fails to begin (a PostgreSQL server, proxy or
    /// failover dropped it while it sat idle) is closed and a fresh one
    /// taken: no write fails for it. One that does not answer is not
    /// replaced: a fresh one would wait as long.
    async fn begin(&mut self, cutoff: Instant) -> Result<(Kept<B>, Instant), Failure> {
        if let Some(mut kept) = self.conn.take() {
            let begun = self
                .wait("BEGIN", cutoff, true, B::execute(&mut kept.conn, B::BEGIN))
                .await;
            match begun {
                Ok(()) => return Ok((kept, Instant::now())),
                Err(Failure::Refused(_) | Failure::Unreachable(_)) => kept.conn.close_on_drop(),
                Err(failure) => {
                    kept.conn.close_on_drop();
                    if failure.is_outage() {
                        self.health.lost(&failure);
                    }
                    return Err(failure);
                }
            }
        }
        let fresh = async {
            let mut conn = self
                .wait("a connection", cutoff, true, self.pool.acquire())
                .await?;
            let ready = async {
                let guard = B::guard(&mut conn).await?;
                B::execute(&mut conn, B::BEGIN).await.map(|()| guard)
            };
            match self.wait("BEGIN", cutoff, true, ready).await {
                Ok(guard) => Ok((Kept { conn, guard }, Instant::now())),
                Err(failure) => {
                    conn.close_on_drop();
                    Err(failure)
                }
            }
        };
        fresh.await.inspect_err(|failure| {
            if failure.is_outage() {
                self.health.lost(failure);
            }
        })
    }

    /// Waits for one step of a transaction until `until` (the cutoff),
    /// and, for a step a database that is up answers at once (`quick`: a
    /// connection, `BEGIN`), at most `ANSWER`. A step cut short by the
    /// cutoff has the probe look whether the database still answers.
    async fn wait<T>(
        &self,
        what: &'static str,
        until: Instant,
        quick: bool,
        step: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, Failure> {
        let answer_by = Instant::now() + ANSWER;
        let limit = if quick { until.min(answer_by) } else { until };
        match tokio::time::timeout_at(limit, step).await {
            Ok(result) => result.map_err(Failure::of),
            Err(_) if quick && limit == answer_by => Err(Failure::NoAnswer {
                what,
                waited: ANSWER,
            }),
            Err(_) => {
                self.health.doubt();
                Err(Failure::TooLate)
            }
        }
    }
}
