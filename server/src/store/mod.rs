//! Embedded persistence: SQLite through sqlx, with migrations compiled into the
//! binary so an installed daemon needs no files beside it.

mod breakpoints;
mod writer;

use std::{borrow::Cow, path::Path, str::FromStr, sync::Arc, time::Duration};

use anyhow::Context;

use sqlx::{
    SqlitePool,
    migrate::{Migration, MigrationType, Migrator},
    sqlite::{
        SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
    },
};
use tokio::sync::{mpsc, oneshot};

pub use breakpoints::{QueuedInsert, StoredBreakpoint};

/// One statement of a write, owning its SQL and its bound values (so a
/// batch that failed can be run again write by write).
#[derive(Clone, Debug)]
struct Statement {
    sql: &'static str,
    binds: Vec<Bind>,
}

/// A value bound to a statement's next `?`.
#[derive(Clone, Debug)]
enum Bind {
    Int(i64),
    Text(String),
    Blob(Vec<u8>),
}

impl Statement {
    fn new(sql: &'static str) -> Self {
        Self {
            sql,
            binds: Vec::new(),
        }
    }

    fn bind(mut self, value: impl Into<Bind>) -> Self {
        self.binds.push(value.into());
        self
    }

    /// Runs it on `conn` and returns its rows.
    async fn run(self, conn: &mut sqlx::SqliteConnection) -> Result<Vec<SqliteRow>, sqlx::Error> {
        let mut query = sqlx::query(self.sql);
        for bind in self.binds {
            query = match bind {
                Bind::Int(v) => query.bind(v),
                Bind::Text(v) => query.bind(v),
                Bind::Blob(v) => query.bind(v),
            };
        }
        query.fetch_all(conn).await
    }
}

impl From<i64> for Bind {
    fn from(v: i64) -> Self {
        Self::Int(v)
    }
}

impl From<&str> for Bind {
    fn from(v: &str) -> Self {
        Self::Text(v.to_owned())
    }
}

impl From<Vec<u8>> for Bind {
    fn from(v: Vec<u8>) -> Self {
        Self::Blob(v)
    }
}

/// A write the store could not make durable: nothing of it was kept.
#[derive(Debug)]
pub struct WriteError {
    /// What was being written ("the new breakpoint", "breakpoint hits").
    pub what: &'static str,
    /// The data directory holding the database.
    pub data_dir: Arc<Path>,
    /// SQLite's (or the pool's) error.
    pub source: sqlx::Error,
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "could not store {} in {}: {}",
            self.what,
            self.data_dir.display(),
            self.source
        )
    }
}

impl std::error::Error for WriteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Migrations in order; each is applied once and recorded by sqlx.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "breakpoints",
        include_str!("../../migrations/0001_breakpoints.sql"),
    ),
    (
        2,
        "breakpoint_authors",
        include_str!("../../migrations/0002_breakpoint_authors.sql"),
    ),
];

/// Creates the database file 0600 before SQLite does (which would use the
/// umask), and tightens it and its WAL files when they are open to others;
/// SQLite gives the `-wal` and `-shm` files it creates the database's mode.
fn private_files(db: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(db)
        .map_err(|err| anyhow::anyhow!("creating {}: {err}", db.display()))?;
    for suffix in ["", "-wal", "-shm"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        crate::datadir::tighten(Path::new(&name), 0o600);
    }
    Ok(())
}

/// A write handed to the writer, not yet known to be durable.
pub struct Queued {
    what: &'static str,
    data_dir: Arc<Path>,
    /// None when the writer is gone (the store is closing).
    rows: Option<oneshot::Receiver<Result<Vec<SqliteRow>, sqlx::Error>>>,
}

impl Queued {
    /// The write's rows, once it is durable.
    async fn done(self) -> Result<Vec<SqliteRow>, WriteError> {
        let outcome = match self.rows {
            Some(rows) => rows.await.unwrap_or(Err(sqlx::Error::WorkerCrashed)),
            None => Err(sqlx::Error::PoolClosed),
        };
        outcome.map_err(|source| WriteError {
            what: self.what,
            data_dir: self.data_dir,
            source,
        })
    }
}

/// The daemon's database.
#[derive(Clone, Debug)]
pub struct Store {
    pool: SqlitePool,
    /// The writer task's queue (`writer.rs`): every write goes through it.
    writes: mpsc::Sender<writer::Job>,
    path: String,
    data_dir: Arc<Path>,
}

impl Store {
    /// Opens (creating if needed) `<data_dir>/stepd.db` and applies migrations.
    pub async fn open(data_dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("creating data directory {}", data_dir.display()))?;
        let file = data_dir.join("stepd.db");
        private_files(&file)?;
        let path = file.display().to_string();
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{path}"))
            .with_context(|| format!("the database path {path}"))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // A write is acknowledged once it is on disk, not merely in the
            // WAL file's page cache (NORMAL would only survive a crash of
            // the daemon, not of the machine); see docs/decisions.md.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .with_context(|| format!("opening database {path}"))?;
        let migrations = MIGRATIONS
            .iter()
            .map(|(version, name, sql)| {
                Migration::new(
                    *version,
                    Cow::Borrowed(*name),
                    MigrationType::Simple,
                    sqlx::SqlStr::from_static(sql),
                    false,
                )
            })
            .collect();
        Migrator::with_migrations(migrations)
            .run(&pool)
            .await
            .with_context(|| format!("migrating database {path}"))?;
        let (writes, jobs) = mpsc::channel(writer::QUEUE);
        tokio::spawn(writer::run(pool.clone(), jobs));
        Ok(Self {
            pool,
            writes,
            path,
            data_dir: Arc::from(data_dir.to_path_buf().into_boxed_path()),
        })
    }

    /// Where the database lives.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The data directory holding the database.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The one way anything is written: `statements` run in a transaction
    /// (`BEGIN IMMEDIATE` … `COMMIT`, shared with writes that arrive at the
    /// same time, `writer.rs`), each to its end, and their rows are handed
    /// back only once the commit succeeded, so an error of any step — the
    /// commit's WAL write on a full disk (`SQLITE_FULL`), an I/O error, a
    /// busy database — reaches the caller and nothing of the write is kept.
    /// (A statement run by itself commits when it is reset; sqlx's
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
    ) -> Result<Vec<SqliteRow>, WriteError> {
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
            data_dir: self.data_dir.clone(),
            rows: queued,
        }
    }

    /// The highest applied migration, as a health check of the store.
    pub async fn schema_version(&self) -> Result<i64, sqlx::Error> {
        sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM _sqlx_migrations WHERE success")
            .fetch_one(&self.pool)
            .await
    }

    /// Closes the pool, flushing the WAL.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}
