//! Persistence, on one of two backends behind one interface
//! (`backend.rs`): embedded SQLite for a single daemon, or PostgreSQL shared
//! by replicas. Migrations are compiled into the binary, so an installed
//! daemon needs no files beside it.

mod backend;
mod breakpoints;
mod changes;
mod directory;
mod history;
mod statement;
mod writer;

#[cfg(test)]
mod tests;

use std::{path::Path, sync::Arc};

use anyhow::Context;
use sqlx::{PgPool, Postgres, Sqlite, SqlitePool};
use tokio::sync::{mpsc, oneshot};

use backend::{Backend, Record};
pub use breakpoints::{QueuedInsert, StoredBreakpoint};
pub use changes::{Change, Changes};
pub use directory::{Owned, Replica};
pub use history::{Dropped, RecordedEvent};
use statement::Statement;

/// A write the store could not make durable: nothing of it was kept.
#[derive(Debug)]
pub struct WriteError {
    /// What was being written ("the new breakpoint", "breakpoint hits").
    pub what: &'static str,
    /// Where the database is: the SQLite file, or the PostgreSQL URL
    /// without its password.
    pub place: Arc<str>,
    /// The database's (or the pool's) error.
    pub source: sqlx::Error,
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "could not store {} in {}: {}",
            self.what, self.place, self.source
        )
    }
}

impl std::error::Error for WriteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// A write handed to the writer, not yet known to be durable.
#[must_use = "a queued write is made whether or not it is awaited; `done` says whether it was"]
pub struct Queued {
    what: &'static str,
    place: Arc<str>,
    /// None when the writer is gone (the store is closing).
    rows: Option<oneshot::Receiver<Result<Vec<StoredBreakpoint>, sqlx::Error>>>,
}

impl Queued {
    /// The write's rows, once it is durable.
    pub async fn done(self) -> Result<Vec<StoredBreakpoint>, WriteError> {
        let outcome = match self.rows {
            Some(rows) => rows.await.unwrap_or(Err(sqlx::Error::WorkerCrashed)),
            None => Err(sqlx::Error::PoolClosed),
        };
        outcome.map_err(|source| WriteError {
            what: self.what,
            place: self.place,
            source,
        })
    }
}

/// The connections of whichever backend the store runs on.
#[derive(Clone, Debug)]
enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Pool {
    /// Runs a read on a connection of its own.
    async fn fetch<T: Record>(&self, statement: Statement) -> Result<Vec<T>, sqlx::Error> {
        match self {
            Self::Sqlite(pool) => Sqlite::run(&mut *pool.acquire().await?, statement).await,
            Self::Postgres(pool) => Postgres::run(&mut *pool.acquire().await?, statement).await,
        }
    }

    /// Starts the writer task of this pool.
    fn spawn_writer(&self) -> mpsc::Sender<writer::Job> {
        let (writes, jobs) = mpsc::channel(writer::QUEUE);
        match self.clone() {
            Self::Sqlite(pool) => tokio::spawn(writer::run(pool, jobs)),
            Self::Postgres(pool) => tokio::spawn(writer::run(pool, jobs)),
        };
        writes
    }
}

/// The daemon's database.
#[derive(Clone, Debug)]
pub struct Store {
    pool: Pool,
    /// The writer task's queue (`writer.rs`): every write goes through it.
    writes: mpsc::Sender<writer::Job>,
    place: Arc<str>,
    /// This daemon's name to the other replicas (`changes.rs`).
    origin: Arc<str>,
}

impl Store {
    /// Opens the embedded database, `<data_dir>/stepd.db`, creating it and
    /// its directory if needed.
    pub async fn open(data_dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("creating data directory {}", data_dir.display()))?;
        Self::open_sqlite(&data_dir.join("stepd.db")).await
    }

    /// Opens the database `url` names (docs/configuration.md):
    /// `postgres://…` (or `postgresql://…`), `sqlite:PATH`, or `sqlite:`
    /// alone for the embedded database in `data_dir`. `origin` names this
    /// daemon to the other replicas of a shared database.
    pub async fn connect(url: &str, data_dir: &Path, origin: &str) -> anyhow::Result<Self> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let place: Arc<str> = without_password(url).into();
            let pool = backend::open_postgres(url, &place, origin).await?;
            return Ok(Self::with(Pool::Postgres(pool), place, origin));
        }
        match url.strip_prefix("sqlite:") {
            Some("") => Self::open(data_dir).await,
            Some(path) => Self::open_sqlite(Path::new(path.trim_start_matches("//"))).await,
            None => anyhow::bail!(
                "the database URL must start with sqlite: or postgres://, not {}",
                without_password(url)
            ),
        }
    }

    async fn open_sqlite(file: &Path) -> anyhow::Result<Self> {
        let pool = backend::open_sqlite(file).await?;
        Ok(Self::with(
            Pool::Sqlite(pool),
            file.display().to_string().into(),
            "",
        ))
    }

    fn with(pool: Pool, place: Arc<str>, origin: &str) -> Self {
        let writes = pool.spawn_writer();
        Self {
            pool,
            writes,
            place,
            origin: origin.into(),
        }
    }

    /// The breakpoint changes other replicas make, from now on; `None` on
    /// SQLite, which has no other replicas.
    pub async fn changes(&self) -> Result<Option<Changes>, sqlx::Error> {
        match &self.pool {
            Pool::Sqlite(_) => Ok(None),
            Pool::Postgres(pool) => Changes::listen(pool, &self.origin).await.map(Some),
        }
    }

    /// Where the database is: the SQLite file, or the PostgreSQL URL
    /// without its password.
    pub fn place(&self) -> &str {
        &self.place
    }

    /// Which backend: "sqlite" or "postgres".
    pub fn backend(&self) -> &'static str {
        match self.pool {
            Pool::Sqlite(_) => "sqlite",
            Pool::Postgres(_) => "postgres",
        }
    }

    /// The one way anything is written: `statements` run in a transaction
    /// (shared with writes that arrive at the same time, `writer.rs`), each
    /// to its end, and their rows are handed back only once the commit
    /// succeeded, so an error of any step — the commit's write on a full
    /// disk (`SQLITE_FULL`), an I/O error, a busy or unreachable database —
    /// reaches the caller and nothing of the write is kept. (A statement
    /// run by itself on SQLite commits when it is reset; sqlx's
    /// `fetch_one`/`fetch_optional` reset it after the first row and drop
    /// that commit's error, so `… RETURNING` would report a write that was
    /// rolled back.)
    ///
    /// The transaction runs on the writer task: a caller that goes away (a
    /// cancelled request) never leaves it half done.
    async fn write(
        &self,
        what: &'static str,
        statements: Vec<Statement>,
    ) -> Result<Vec<StoredBreakpoint>, WriteError> {
        self.queue(what, statements).await.done().await
    }

    /// Hands a write to the writer and returns once it is queued, behind
    /// every write handed over before it; `Queued::done` waits for it.
    async fn queue(&self, what: &'static str, statements: Vec<Statement>) -> Queued {
        let (reply, rows) = oneshot::channel();
        let queued = match self.writes.reserve().await {
            Ok(permit) => {
                permit.send(writer::Job { statements, reply });
                Some(rows)
            }
            Err(_) => None,
        };
        Queued {
            what,
            place: self.place.clone(),
            rows: queued,
        }
    }

    /// The highest applied migration, as a health check of the store.
    pub async fn schema_version(&self) -> Result<i64, sqlx::Error> {
        const SQL: &str = "SELECT COALESCE(MAX(version), 0) FROM _sqlx_migrations WHERE success";
        match &self.pool {
            Pool::Sqlite(pool) => sqlx::query_scalar(SQL).fetch_one(pool).await,
            Pool::Postgres(pool) => sqlx::query_scalar(SQL).fetch_one(pool).await,
        }
    }

    /// Whether `close` was called.
    pub fn is_closed(&self) -> bool {
        match &self.pool {
            Pool::Sqlite(pool) => pool.is_closed(),
            Pool::Postgres(pool) => pool.is_closed(),
        }
    }

    /// Closes the pool (on SQLite, flushing the WAL).
    pub async fn close(&self) {
        match &self.pool {
            Pool::Sqlite(pool) => pool.close().await,
            Pool::Postgres(pool) => pool.close().await,
        }
    }
}

/// A database URL as it may be shown: without the password of its user
/// information or of its `password=` parameter.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split_once(':').map_or(user, |(name, _)| name);
            format!("{user}@{host}")
        }
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some(("password", _)) => "password=***".to_owned(),
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}
