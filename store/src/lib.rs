//! Persistence, on one of two backends behind one interface
//! (`backend.rs`): embedded SQLite for a single daemon, or PostgreSQL shared
//! by replicas. Migrations are compiled into the binary, so an installed
//! daemon needs no files beside it.

pub mod datadir;

mod backend;
mod breakpoints;
mod changes;
mod commit_guard;
mod directory;
mod failure;
mod health;
mod history;
mod port;
mod records;
mod statement;
mod writer;

#[cfg(test)]
mod registry_tests;
#[cfg(test)]
mod tests;

use std::{path::Path, sync::Arc, time::Duration};

use anyhow::Context;
use sqlx::{Connection as _, PgPool, SqlitePool, pool::PoolConnection};
use tokio::sync::{mpsc, oneshot};

use backend::{Backend, Record};
pub use breakpoints::QueuedInsert;
pub use changes::{Change, Changes};
pub use directory::{Owned, RETIRED, Replica};
pub use failure::Failure;
pub use health::Down;
use health::Health;
pub use history::{Dropped, RecordedEvent};
pub use port::unavailable;
pub use records::{EndedQuery, SessionRecord};
use statement::Statement;
pub use stepd_core::breakpoints::StoredBreakpoint;
pub use stepd_core::within::{self, Within};

/// How long the database may take to hand over a connection or to answer
/// `BEGIN`, whatever the write's deadline: both are immediate on a database
/// that is up.
pub(crate) const ANSWER: Duration = Duration::from_secs(5);

/// How long a read may wait for the database's answer once it has a
/// connection (getting one is bounded by the pool, `ANSWER` on
/// PostgreSQL): a frozen server would otherwise hold it for good.
const READ: Duration = Duration::from_secs(30);

/// A write the store could not make durable: nothing of it was kept.
#[derive(Debug)]
pub struct WriteError {
    /// What was being written ("the new breakpoint", "breakpoint hits").
    pub what: &'static str,
    /// Where the database is: the SQLite file, or the PostgreSQL URL
    /// without its password.
    pub place: Arc<str>,
    /// Why.
    pub source: Failure,
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
#[must_use = "a queued write is made whether or not it is awaited (unless its caller leaves \
              first); `done` says whether it was"]
pub struct Queued {
    what: &'static str,
    place: Arc<str>,
    within: Within,
    health: Arc<Health>,
    /// The writer's answer to come, or why the write was not queued.
    rows: Result<oneshot::Receiver<writer::Outcome>, Failure>,
}

impl Queued {
    /// The write's rows, once it is durable. At the write's cutoff, a
    /// write the writer has not claimed for a commit is abandoned and
    /// fails at once, whatever the writer is busy with (and the probe
    /// looks whether the database still answers: the writer may be held by
    /// a frozen server); a claimed one is answered when its commit is.
    pub async fn done(self) -> Result<Vec<StoredBreakpoint>, WriteError> {
        let writer_gone = || Err(Failure::of(sqlx::Error::WorkerCrashed));
        let outcome = match self.rows {
            Ok(mut rows) => tokio::select! {
                outcome = &mut rows => outcome.unwrap_or_else(|_| writer_gone()),
                () = tokio::time::sleep_until(self.within.cutoff()) => {
                    if self.within.abandon() {
                        self.health.doubt();
                        Err(Failure::TooLate)
                    } else {
                        rows.await.unwrap_or_else(|_| writer_gone())
                    }
                }
            },
            Err(failure) => Err(failure),
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
            Self::Sqlite(pool) => read(pool.acquire().await?, statement).await,
            Self::Postgres(pool) => read(pool.acquire().await?, statement).await,
        }
    }

    /// Starts the writer task of this pool.
    fn spawn_writer(&self, health: Arc<Health>) -> mpsc::Sender<writer::Job> {
        let (writes, jobs) = mpsc::channel(writer::QUEUE);
        match self.clone() {
            Self::Sqlite(pool) => tokio::spawn(writer::run(pool, jobs, health)),
            Self::Postgres(pool) => tokio::spawn(writer::run(pool, jobs, health)),
        };
        writes
    }

    /// Whether the database answers `SELECT 1` on a fresh connection (the
    /// probe of `health.rs`): a pooled one may be one a frozen server holds.
    async fn answers(&self) -> Result<(), sqlx::Error> {
        use sqlx::ConnectOptions as _;
        match self {
            Self::Sqlite(pool) => {
                let mut conn = pool.connect_options().connect().await?;
                sqlx::query("SELECT 1").execute(&mut conn).await?;
                conn.close().await
            }
            Self::Postgres(pool) => {
                let mut conn = pool.connect_options().connect().await?;
                sqlx::query("SELECT 1").execute(&mut conn).await?;
                conn.close().await
            }
        }
    }

    fn is_closed(&self) -> bool {
        match self {
            Self::Sqlite(pool) => pool.is_closed(),
            Self::Postgres(pool) => pool.is_closed(),
        }
    }
}

/// Runs a read on `conn`, waiting at most `READ`. A connection left
/// mid-read is closed, not returned to the pool, which would wait for it.
async fn read<B: Backend, T: Record>(
    mut conn: PoolConnection<B>,
    statement: Statement,
) -> Result<Vec<T>, sqlx::Error> {
    match tokio::time::timeout(READ, B::run(&mut conn, statement)).await {
        Ok(rows) => rows,
        Err(_) => {
            conn.close_on_drop();
            Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the database did not answer a read within {} s",
                    READ.as_secs()
                ),
            )))
        }
    }
}

/// The daemon's database.
#[derive(Clone, Debug)]
pub struct Store {
    pool: Pool,
    /// The writer task's queue (`writer.rs`): every write goes through it.
    writes: mpsc::Sender<writer::Job>,
    /// Whether the database is known to be down (`health.rs`).
    health: Arc<Health>,
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
        let health = Health::new(pool.clone(), place.clone());
        let writes = pool.spawn_writer(health.clone());
        Self {
            pool,
            writes,
            health,
            place,
            origin: origin.into(),
        }
    }

    /// Since when, and why, the database is known to be down; `None` while
    /// it is taken to be up.
    pub fn down(&self) -> Option<Down> {
        self.health.down()
    }

    /// Refuses at once what would write `what` while the database is known
    /// to be down: a change that reads before it writes calls it first.
    pub fn check_up(&self, what: &'static str) -> Result<(), WriteError> {
        match self.health.down() {
            Some(down) => Err(WriteError {
                what,
                place: self.place.clone(),
                source: Failure::Down(down),
            }),
            None => Ok(()),
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
    /// cancelled request) never leaves it half done. `within` bounds it
    /// (`writer.rs`): a write not committed in time is not committed at all.
    async fn write(
        &self,
        what: &'static str,
        statements: Vec<Statement>,
        within: &Within,
    ) -> Result<Vec<StoredBreakpoint>, WriteError> {
        self.queue(what, statements, within).await.done().await
    }

    /// Hands a write to the writer and returns once it is queued, behind
    /// every write handed over before it; `Queued::done` waits for it.
    /// While the database is known to be down the write is refused at
    /// once, and one that cannot be queued before its cutoff is dropped.
    async fn queue(
        &self,
        what: &'static str,
        statements: Vec<Statement>,
        within: &Within,
    ) -> Queued {
        let (reply, rows) = oneshot::channel();
        let queued = match writer::refusal(within, &self.health) {
            Some(failure) => Err(failure),
            None => match tokio::time::timeout_at(within.cutoff(), self.writes.reserve()).await {
                Ok(Ok(permit)) => {
                    permit.send(writer::Job {
                        statements,
                        within: within.clone(),
                        reply,
                    });
                    Ok(rows)
                }
                Ok(Err(_)) => Err(Failure::of(sqlx::Error::PoolClosed)),
                Err(_) => Err(Failure::TooLate),
            },
        };
        Queued {
            what,
            place: self.place.clone(),
            within: within.clone(),
            health: self.health.clone(),
            rows: queued,
        }
    }

    /// The highest applied migration, as a health check of the store.
    pub async fn schema_version(&self) -> Result<i64, sqlx::Error> {
        let statement = Statement::new(
            "SELECT COALESCE(MAX(version), 0) AS n FROM _sqlx_migrations WHERE success",
        );
        let rows: Vec<history::Number> = self.pool.fetch(statement).await?;
        Ok(rows.first().map_or(0, |n| n.0))
    }

    /// Whether `close` was called.
    pub fn is_closed(&self) -> bool {
        self.pool.is_closed()
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
