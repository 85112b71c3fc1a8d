//! The two databases under the store: embedded SQLite for a single daemon,
//! PostgreSQL for replicas that share their state. Everything above this
//! file is written once; what differs between them — connecting, the
//! migrations, how a writing transaction begins, the driver's row type —
//! is here.

use std::{borrow::Cow, future::Future, path::Path, str::FromStr, time::Duration};

use anyhow::Context;
use sqlx::{
    Database, PgPool, Postgres, Row, Sqlite, SqlitePool,
    migrate::{Migration, MigrationType, Migrator},
    postgres::{PgConnectOptions, PgPoolOptions},
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};

use super::{
    StoredBreakpoint,
    commit_guard::CommitGuard,
    statement::{Bind, Statement},
};

/// One database engine as the store uses it.
pub(super) trait Backend: Database + CommitGuard {
    /// Opens a transaction that writes. SQLite's `IMMEDIATE` takes the
    /// write lock at once, so a transaction never fails half way for want
    /// of it; PostgreSQL locks rows as it goes.
    const BEGIN: &'static str;

    /// Runs a statement on `conn` and decodes the rows it returns.
    fn run<T: Record>(
        conn: &mut Self::Connection,
        statement: Statement,
    ) -> impl Future<Output = Result<Vec<T>, sqlx::Error>> + Send;

    /// Runs SQL with nothing bound and no rows (`BEGIN`, `COMMIT`).
    fn execute(
        conn: &mut Self::Connection,
        sql: &'static str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
}

/// A row's columns by name, whichever driver read it.
pub(super) trait Columns {
    fn int(&self, column: &str) -> Result<i64, sqlx::Error>;
    fn text(&self, column: &str) -> Result<String, sqlx::Error>;
    fn blob(&self, column: &str) -> Result<Vec<u8>, sqlx::Error>;
}

/// What a row decodes into.
pub(super) trait Record: Sized + Send + 'static {
    fn from_row(row: &dyn Columns) -> Result<Self, sqlx::Error>;
}

macro_rules! backend {
    ($db:ty, $row:ty, $begin:literal) => {
        impl Backend for $db {
            const BEGIN: &'static str = $begin;

            async fn run<T: Record>(
                conn: &mut Self::Connection,
                statement: Statement,
            ) -> Result<Vec<T>, sqlx::Error> {
                let mut query = sqlx::query::<$db>(statement.sql);
                for bind in statement.binds {
                    query = match bind {
                        Bind::Int(v) => query.bind(v),
                        Bind::Text(v) => query.bind(v),
                        Bind::Blob(v) => query.bind(v),
                    };
                }
                let rows = query.fetch_all(conn).await?;
                rows.iter().map(|row| T::from_row(row)).collect()
            }

            async fn execute(
                conn: &mut Self::Connection,
                sql: &'static str,
            ) -> Result<(), sqlx::Error> {
                sqlx::query::<$db>(sql).execute(conn).await.map(|_| ())
            }
        }

        impl Columns for $row {
            fn int(&self, column: &str) -> Result<i64, sqlx::Error> {
                self.try_get(column)
            }
            fn text(&self, column: &str) -> Result<String, sqlx::Error> {
                self.try_get(column)
            }
            fn blob(&self, column: &str) -> Result<Vec<u8>, sqlx::Error> {
                self.try_get(column)
            }
        }
    };
}

backend!(Sqlite, sqlx::sqlite::SqliteRow, "BEGIN IMMEDIATE");
backend!(Postgres, sqlx::postgres::PgRow, "BEGIN");

impl Record for StoredBreakpoint {
    fn from_row(row: &dyn Columns) -> Result<Self, sqlx::Error> {
        use prost::Message as _;
        let spec =
            stepd_proto::v1::BreakpointSpec::decode(row.blob("spec")?.as_slice()).map_err(|e| {
                sqlx::Error::ColumnDecode {
                    index: "spec".into(),
                    source: Box::new(e),
                }
            })?;
        Ok(StoredBreakpoint {
            id: row.int("id")?,
            spec,
            hit_count: u64::try_from(row.int("hit_count")?).unwrap_or(0),
            created_at_us: row.int("created_at_us")?,
            updated_at_us: row.int("updated_at_us")?,
            created_by: row.text("created_by")?,
            updated_by: row.text("updated_by")?,
        })
    }
}

/// The schema version a store has once every migration is applied.
#[cfg(test)]
pub(super) fn latest_version() -> i64 {
    let version = |list: &[(i64, &str, &str)]| list.last().map_or(0, |m| m.0);
    assert_eq!(version(SQLITE_MIGRATIONS), version(POSTGRES_MIGRATIONS));
    version(SQLITE_MIGRATIONS)
}

/// Each backend's migrations, in order; sqlx applies each once and
/// records it. The two lists keep the same versions and names.
const SQLITE_MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "breakpoints",
        include_str!("../migrations/sqlite/0001_breakpoints.sql"),
    ),
    (
        2,
        "breakpoint_authors",
        include_str!("../migrations/sqlite/0002_breakpoint_authors.sql"),
    ),
    (
        3,
        "breakpoint_changes",
        include_str!("../migrations/sqlite/0003_breakpoint_changes.sql"),
    ),
    (
        4,
        "session_history",
        include_str!("../migrations/sqlite/0004_session_history.sql"),
    ),
    (
        5,
        "directory",
        include_str!("../migrations/sqlite/0005_directory.sql"),
    ),
    (
        6,
        "commit_guard",
        include_str!("../migrations/sqlite/0006_commit_guard.sql"),
    ),
    (
        7,
        "ended_sessions",
        include_str!("../migrations/sqlite/0007_ended_sessions.sql"),
    ),
];
const POSTGRES_MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "breakpoints",
        include_str!("../migrations/postgres/0001_breakpoints.sql"),
    ),
    (
        2,
        "breakpoint_authors",
        include_str!("../migrations/postgres/0002_breakpoint_authors.sql"),
    ),
    (
        3,
        "breakpoint_changes",
        include_str!("../migrations/postgres/0003_breakpoint_changes.sql"),
    ),
    (
        4,
        "session_history",
        include_str!("../migrations/postgres/0004_session_history.sql"),
    ),
    (
        5,
        "directory",
        include_str!("../migrations/postgres/0005_directory.sql"),
    ),
    (
        6,
        "commit_guard",
        include_str!("../migrations/postgres/0006_commit_guard.sql"),
    ),
    (
        7,
        "ended_sessions",
        include_str!("../migrations/postgres/0007_ended_sessions.sql"),
    ),
];

fn migrator(migrations: &'static [(i64, &'static str, &'static str)]) -> Migrator {
    Migrator::with_migrations(
        migrations
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
            .collect(),
    )
}

/// Opens (creating if needed) the SQLite database at `file` and migrates it.
pub(super) async fn open_sqlite(file: &Path) -> anyhow::Result<SqlitePool> {
    private_files(file)?;
    let path = file.display();
    let options = SqliteConnectOptions::from_str(&format!("sqlite://{path}"))
        .with_context(|| format!("the database path {path}"))?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // A write is acknowledged once it is on disk, not merely in the
        // WAL file's page cache (NORMAL would only survive a crash of
        // the daemon, not of the machine); see docs/decisions.md.
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(5))
        // The history's index pages of a thousand sessions are written
        // at once; a cache that holds them saves reading each back.
        // Checkpoints stay at SQLite's 1,000 pages: 10,000 saved copies of
        // the history's index pages but made every other commit about 5 %
        // slower (decision 127).
        .pragma("cache_size", "-16384");
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .with_context(|| format!("opening database {path}"))?;
    migrator(SQLITE_MIGRATIONS)
        .run(&pool)
        .await
        .with_context(|| format!("migrating database {path}"))?;
    Ok(pool)
}

/// Connects to the PostgreSQL database at `url` as `origin` (its
/// `application_name`, which the change notifications carry) and migrates
/// it. Replicas starting together may migrate at once: sqlx serialises them
/// with an advisory lock.
pub(super) async fn open_postgres(url: &str, shown: &str, origin: &str) -> anyhow::Result<PgPool> {
    let options = PgConnectOptions::from_str(url)
        .with_context(|| format!("the database URL {shown}"))?
        .application_name(origin);
    let pool = PgPoolOptions::new()
        .max_connections(8)
        // A server that does not hand over a connection this soon is
        // taken for down (`health.rs`); a frozen one would otherwise hold
        // each caller as long as it likes.
        .acquire_timeout(super::ANSWER)
        .connect_with(options)
        .await
        .with_context(|| format!("connecting to {shown}"))?;
    migrator(POSTGRES_MIGRATIONS)
        .run(&pool)
        .await
        .with_context(|| format!("migrating database {shown}"))?;
    Ok(pool)
}

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
