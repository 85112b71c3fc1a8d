//! The database's own refusal of a commit that begins after a write's
//! cutoff (decision 136). The writer sends a commit only before the
//! cutoff, but a frozen server or a lossy network may deliver it later,
//! after the caller was told the write failed; the database then rolls it
//! back.

use std::{
    future::Future,
    sync::{
        Arc, LazyLock,
        atomic::{AtomicU64, Ordering},
    },
};

use sqlx::{Database, Postgres, Sqlite};
use tokio::time::Instant;

/// How one backend refuses a late commit.
pub(super) trait CommitGuard: Database {
    /// What the writer keeps beside its connection to set each commit's
    /// cutoff.
    type Guard: Send + Sync + 'static;

    /// The error code of a commit refused for beginning late.
    const LATE_COMMIT: &'static str;

    /// Readies a connection the writer took, once.
    fn guard(
        conn: &mut Self::Connection,
    ) -> impl Future<Output = Result<Self::Guard, sqlx::Error>> + Send;

    /// Makes the transaction begun on `conn` (whose `BEGIN` answered at
    /// `begun`) refuse to commit if its commit begins after `cutoff`: the
    /// commit then fails with `LATE_COMMIT` and nothing is kept.
    fn commit_before(
        conn: &mut Self::Connection,
        guard: &Self::Guard,
        cutoff: Instant,
        begun: Instant,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Whether `err` is a commit refused for beginning late.
    fn refused_late(err: &sqlx::Error) -> bool {
        err.as_database_error()
            .and_then(|db| db.code())
            .is_some_and(|code| code == Self::LATE_COMMIT)
    }
}

/// SQLite runs in the daemon: a commit hook, which SQLite calls as a
/// commit begins and which turns it into a rollback by answering false,
/// compares the daemon's clock with the cutoff the writer set. The hook is
/// set once per connection (setting it takes a round trip to SQLite's
/// thread); each commit only stores its cutoff.
impl CommitGuard for Sqlite {
    /// The cutoff of the commit under way, in nanoseconds after `EPOCH`.
    type Guard = Arc<AtomicU64>;

    /// `SQLITE_CONSTRAINT_COMMITHOOK`.
    const LATE_COMMIT: &'static str = "531";

    async fn guard(conn: &mut sqlx::SqliteConnection) -> Result<Self::Guard, sqlx::Error> {
        let cutoff = Arc::new(AtomicU64::new(u64::MAX));
        let hook = cutoff.clone();
        conn.lock_handle()
            .await?
            .set_commit_hook(move || since_epoch(Instant::now()) <= hook.load(Ordering::Acquire));
        Ok(cutoff)
    }

    async fn commit_before(
        _conn: &mut sqlx::SqliteConnection,
        guard: &Self::Guard,
        cutoff: Instant,
        _begun: Instant,
    ) -> Result<(), sqlx::Error> {
        guard.store(since_epoch(cutoff), Ordering::Release);
        Ok(())
    }
}

/// The instant SQLite's cutoffs are counted from.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn since_epoch(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(*EPOCH).as_nanos()).unwrap_or(u64::MAX)
}

/// PostgreSQL checks its own clock, with migration 0006's deferred
/// trigger: the latest time the commit may begin is the transaction's
/// start, `now()`, which the server took before `BEGIN` answered, plus
/// what was left to the cutoff when it answered; so never later than the
/// cutoff, and no clocks are compared.
impl CommitGuard for Postgres {
    type Guard = ();

    /// Raised by migration 0006's trigger.
    const LATE_COMMIT: &'static str = "SD001";

    async fn guard(_conn: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
        Ok(())
    }

    async fn commit_before(
        conn: &mut sqlx::PgConnection,
        _guard: &(),
        cutoff: Instant,
        begun: Instant,
    ) -> Result<(), sqlx::Error> {
        let left = cutoff.saturating_duration_since(begun);
        sqlx::query(
            "INSERT INTO stepd_commit_guard (pid, commit_by) \
             VALUES (pg_backend_pid(), now() + $1 * INTERVAL '1 microsecond') \
             ON CONFLICT (pid) DO UPDATE SET commit_by = excluded.commit_by",
        )
        .bind(i64::try_from(left.as_micros()).unwrap_or(i64::MAX))
        .execute(conn)
        .await
        .map(|_| ())
    }
}
