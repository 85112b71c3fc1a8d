//! The one task that writes: writes that arrive together are committed in
//! one transaction, so they share one sync to disk (group commit), and each
//! is acknowledged only after that commit succeeded.
//!
//! A batch in which any statement fails is rolled back whole and its writes
//! are retried each in a transaction of its own, so one write's error (a
//! full disk, a constraint) is that write's alone: SQLite may roll back a
//! whole transaction by itself on such errors, and the writes after it
//! would then run outside any transaction.

use tokio::sync::{mpsc, oneshot};

use super::{StoredBreakpoint, backend::Backend, statement::Statement};

/// The most writes one transaction takes; more wait for the next.
const BATCH: usize = 64;

/// Writes waiting for the writer; callers wait when it is this far behind.
pub(super) const QUEUE: usize = 1024;

/// One write: its statements and where its rows (or error) go.
pub(super) struct Job {
    pub statements: Vec<Statement>,
    pub reply: oneshot::Sender<Result<Vec<StoredBreakpoint>, sqlx::Error>>,
}

/// Runs until every sender is gone, then returns.
pub(super) async fn run<B: Backend>(pool: sqlx::Pool<B>, mut jobs: mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(BATCH);
    while jobs.recv_many(&mut batch, BATCH).await > 0 {
        // A caller that went away still has its write made: it may have
        // been acknowledged to nobody, but never half made.
        if batch.len() == 1 {
            let job = batch.remove(0);
            let outcome = transaction(&pool, vec![job.statements]).await;
            let _ = job.reply.send(outcome.map(|mut rows| rows.remove(0)));
            continue;
        }
        let (statements, replies): (Vec<_>, Vec<_>) = batch
            .drain(..)
            .map(|job| (job.statements, job.reply))
            .unzip();
        // Statements are consumed by running them, so a batch that fails is
        // retried from copies taken before it ran.
        let copies = statements.clone();
        match transaction(&pool, statements).await {
            Ok(rows) => {
                for (reply, rows) in replies.into_iter().zip(rows) {
                    let _ = reply.send(Ok(rows));
                }
            }
            Err(_) => {
                for (reply, statements) in replies.into_iter().zip(copies) {
                    let outcome = transaction(&pool, vec![statements]).await;
                    let _ = reply.send(outcome.map(|mut rows| rows.remove(0)));
                }
            }
        }
    }
}

/// Runs each write's statements in one transaction (`Backend::BEGIN` …
/// `COMMIT`) and returns each write's rows, only once the commit
/// succeeded. A connection whose transaction failed is closed rather than
/// returned to the pool: after a failed `COMMIT` SQLite has rolled back by
/// itself and the connection's transaction state is not to be trusted.
async fn transaction<B: Backend>(
    pool: &sqlx::Pool<B>,
    writes: Vec<Vec<Statement>>,
) -> Result<Vec<Vec<StoredBreakpoint>>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let result = async {
        B::execute(&mut conn, B::BEGIN).await?;
        let mut all = Vec::with_capacity(writes.len());
        for statements in writes {
            let mut rows = Vec::new();
            for statement in statements {
                rows.extend(B::run::<StoredBreakpoint>(&mut conn, statement).await?);
            }
            all.push(rows);
        }
        B::execute(&mut conn, "COMMIT").await?;
        Ok::<_, sqlx::Error>(all)
    }
    .await;
    if result.is_err() {
        // Closing rolls back whatever is still open.
        let _ = conn.close().await;
    }
    result
}
