//! Embedded persistence: SQLite through sqlx, with migrations compiled into the
//! binary so an installed daemon needs no files beside it.

mod breakpoints;

use std::{borrow::Cow, path::Path, str::FromStr, time::Duration};

use anyhow::Context;

use sqlx::{
    SqlitePool,
    migrate::{Migration, MigrationType, Migrator},
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};

pub use breakpoints::StoredBreakpoint;

/// Migrations in order; each is applied once and recorded by sqlx.
const MIGRATIONS: &[(i64, &str, &str)] = &[(
    1,
    "breakpoints",
    include_str!("../../migrations/0001_breakpoints.sql"),
)];

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

/// The daemon's database.
#[derive(Clone, Debug)]
pub struct Store {
    pool: SqlitePool,
    path: String,
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
            .synchronous(SqliteSynchronous::Normal)
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
        Ok(Self { pool, path })
    }

    /// Where the database lives.
    pub fn path(&self) -> &str {
        &self.path
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
