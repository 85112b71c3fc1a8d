//! The one task that writes: writes that arrive together are committed in
//! one transaction, so they share one sync to disk (group commit), and each
//! is acknowledged only after that commit succeeded.
//!
//! A batch in which any statement fails is rolled back whole and its writes
//! are retried each in a transaction of its own, so one write's error (a
//! full disk, a constraint) is that write's alone: SQLite may roll back a
//! whole transaction by itself on such errors, and the writes after it
//! would then run outside any transaction.

use sqlx::{SqlitePool, sqlite::SqliteRow};
use tokio::sync::{mpsc, oneshot};

use super::Statement;

/// The most writes one transaction takes; more wait for the next.
const BATCH: usize = 64;

/// Writes waiting for the writer; callers wait when it is this far behind.
pub(super) const QUEUE: usize = 1024;

/// One write: its statements and where its rows (or error) go.
pub(super) struct Job {
    pub statements: Vec<Statement>,
    pub reply: oneshot::Sender<Result<Vec<SqliteRow>, sqlx::Error>>,
}

/// Runs until every sender is gone, then returns.
pub(super) async fn run(pool: SqlitePool, mut jobs: mpsc::Receiver<Job>) {
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

/// Runs each write's statements in one `BEGIN IMMEDIATE` … `COMMIT` and
/// returns each write's rows, only once the commit succeeded. A connection
/// whose transaction failed is closed rather than returned to the pool:
/// after a failed `COMMIT` SQLite has rolled back by itself and the
/// connection's transaction state is not to be trusted.
async fn transaction(
    pool: &SqlitePool,
    writes: Vec<Vec<Statement>>,
) -> Result<Vec<Vec<SqliteRow>>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let result = async {
        sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
        let mut all = Vec::with_capacity(writes.len());
        for statements in writes {
            let mut rows = Vec::new();
            for statement in statements {
                rows.extend(statement.run(&mut conn).await?);
            }
            all.push(rows);
        }
        sqlx::query("COMMIT").execute(&mut *conn).await?;
        Ok::<_, sqlx::Error>(all)
    }
    .await;
    if result.is_err() {
        // Closing rolls back whatever is still open.
        let _ = conn.close().await;
    }
    result
}

#[cfg(test)]
mod tests {
    use stepd_proto::v1::BreakpointSpec;

    use super::super::{Statement, Store};

    async fn store(tag: &str) -> (Store, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("stepd-writer-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        (Store::open(&dir).await.unwrap(), dir)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn writes_made_together_are_each_acknowledged_and_kept() {
        let (store, dir) = store("together").await;
        let writes: Vec<_> = (0..200)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let spec = BreakpointSpec {
                        condition: format!("i == {i}"),
                        ..Default::default()
                    };
                    store.insert_breakpoint(&spec, i, "test").await.unwrap().id
                })
            })
            .collect();
        let mut ids = Vec::new();
        for write in writes {
            ids.push(write.await.unwrap());
        }
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 200, "every write got an id of its own");
        store.close().await;
        let reopened = Store::open(&dir).await.unwrap();
        assert_eq!(reopened.list_breakpoints().await.unwrap().len(), 200);
        reopened.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_failing_write_fails_alone_when_it_shares_a_transaction() {
        let (store, dir) = store("alone").await;
        let writes: Vec<_> = (0..40)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    if i % 10 == 3 {
                        let bad = Statement::new("INSERT INTO no_such_table VALUES (?)").bind(i);
                        store.write("a bad row", vec![bad]).await.map(|_| ())
                    } else {
                        let spec = BreakpointSpec::default();
                        store.insert_breakpoint(&spec, i, "test").await.map(|_| ())
                    }
                })
            })
            .collect();
        let mut outcomes = Vec::new();
        for write in writes {
            outcomes.push(write.await.unwrap());
        }
        for (i, outcome) in outcomes.iter().enumerate() {
            assert_eq!(outcome.is_err(), i % 10 == 3, "write {i}: {outcome:?}");
        }
        assert_eq!(store.list_breakpoints().await.unwrap().len(), 36);
        store.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}
