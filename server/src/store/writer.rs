//! The one task that writes: writes that arrive together are committed in
//! one transaction, so they share one sync to disk (group commit), and each
//! is acknowledged only after that commit succeeded.
//!
//! A batch in which any statement fails is rolled back whole and its writes
//! are retried each in a transaction of its own, so one write's error (a
//! full disk, a constraint) is that write's alone: SQLite may roll back a
//! whole transaction by itself on such errors, and the writes after it
//! would then run outside any transaction.

use sqlx::pool::PoolConnection;
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
    // Closing the pool waits for every connection to come back, the
    // writer's own included.
    let closed = pool.close_event();
    tokio::pin!(closed);
    let mut writer = Connection::new(pool);
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
        // A caller that went away still has its write made: it may have
        // been acknowledged to nobody, but never half made.
        if batch.len() == 1 {
            let job = batch.remove(0);
            let outcome = writer.transaction(vec![job.statements]).await;
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
        match writer.transaction(statements).await {
            Ok(rows) => {
                for (reply, rows) in replies.into_iter().zip(rows) {
                    let _ = reply.send(Ok(rows));
                }
            }
            Err(_) => {
                for (reply, statements) in replies.into_iter().zip(copies) {
                    let outcome = writer.transaction(vec![statements]).await;
                    let _ = reply.send(outcome.map(|mut rows| rows.remove(0)));
                }
            }
        }
    }
}

/// The writer's connection, kept from one transaction to the next. A
/// SQLite connection drops its whole page cache when another connection
/// wrote since its last transaction, so a writer taking whichever pooled
/// connection was idle read back every index page it touched, each time;
/// its own connection keeps them.
struct Connection<B: Backend> {
    pool: sqlx::Pool<B>,
    conn: Option<PoolConnection<B>>,
}

impl<B: Backend> Connection<B> {
    fn new(pool: sqlx::Pool<B>) -> Self {
        Self { pool, conn: None }
    }

    /// Runs each write's statements in one transaction (`Backend::BEGIN` …
    /// `COMMIT`) and returns each write's rows, only once the commit
    /// succeeded. A connection whose transaction failed is closed rather
    /// than kept: after a failed `COMMIT` SQLite has rolled back by itself
    /// and the connection's transaction state is not to be trusted.
    async fn transaction(
        &mut self,
        writes: Vec<Vec<Statement>>,
    ) -> Result<Vec<Vec<StoredBreakpoint>>, sqlx::Error> {
        let mut conn = self.begin().await?;
        let result = async {
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
        if result.is_ok() {
            self.conn = Some(conn);
        } else {
            // Closing rolls back whatever is still open.
            let _ = conn.close().await;
        }
        result
    }

    /// A connection with a transaction begun. The kept one is not checked
    /// by the pool as a connection taken from it is, so one that fails to
    /// begin (a PostgreSQL server, proxy or failover dropped it while it
    /// sat idle) is closed and a fresh one taken: no write fails for it.
    async fn begin(&mut self) -> Result<PoolConnection<B>, sqlx::Error> {
        if let Some(conn) = self.conn.take()
            && let Ok(conn) = begun(conn).await
        {
            return Ok(conn);
        }
        begun(self.pool.acquire().await?).await
    }
}

/// `conn` with a transaction begun, or closed if it could not begin one.
async fn begun<B: Backend>(mut conn: PoolConnection<B>) -> Result<PoolConnection<B>, sqlx::Error> {
    match B::execute(&mut conn, B::BEGIN).await {
        Ok(_) => Ok(conn),
        Err(err) => {
            let _ = conn.close().await;
            Err(err)
        }
    }
}
