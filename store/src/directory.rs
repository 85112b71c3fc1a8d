//! The session directory: the replicas sharing the database, each with the
//! address its peers reach it on and the lease it renews, and which replica
//! runs which session.

use super::{
    RecordedEvent, Statement, Store, Within, WriteError,
    backend::{Columns, Record},
    history::Number,
};

/// The lease of a replica that shut down cleanly (its row stays until a
/// peer finds it gone).
pub const RETIRED: i64 = 0;

/// One replica as registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    /// Its instance id.
    pub id: String,
    /// Where its peers reach it (`host:port`).
    pub address: String,
    pub started_us: i64,
    /// Until when its sessions are its own unless it renews.
    pub lease_until_us: i64,
}

impl Record for Replica {
    fn from_row(row: &dyn Columns) -> Result<Self, sqlx::Error> {
        Ok(Self {
            id: row.text("id")?,
            address: row.text("address")?,
            started_us: row.int("started_us")?,
            lease_until_us: row.int("lease_until_us")?,
        })
    }
}

/// A session and the replica that runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    pub session_id: String,
    pub replica_id: String,
}

impl Record for Owned {
    fn from_row(row: &dyn Columns) -> Result<Self, sqlx::Error> {
        Ok(Self {
            session_id: row.text("session_id")?,
            replica_id: row.text("replica_id")?,
        })
    }
}

impl Store {
    /// Registers this replica, or renews its lease.
    pub async fn renew_replica(&self, replica: &Replica) -> Result<(), WriteError> {
        let statement = Statement::new(
            "INSERT INTO stepd_replicas (id, address, started_us, lease_until_us) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (id) DO UPDATE SET address = excluded.address, \
             lease_until_us = excluded.lease_until_us",
        )
        .bind(replica.id.as_str())
        .bind(replica.address.as_str())
        .bind(replica.started_us)
        .bind(replica.lease_until_us);
        self.write("this replica's lease", vec![statement], &Within::internal())
            .await?;
        Ok(())
    }

    /// Takes this replica's sessions out of the directory and marks it
    /// retired (a lease that ends at [`RETIRED`]): its peers need not wait
    /// for the lease, and end what they still show of it as shut down.
    pub async fn retire_replica(&self, id: &str) -> Result<(), WriteError> {
        let statements = vec![
            Statement::new("DELETE FROM stepd_sessions WHERE replica_id = $1").bind(id),
            Statement::new("UPDATE stepd_replicas SET lease_until_us = $2 WHERE id = $1")
                .bind(id)
                .bind(RETIRED),
        ];
        self.write("this replica's retirement", statements, &Within::internal())
            .await?;
        Ok(())
    }

    /// Takes a replica that was found lost (its lease ran out before
    /// `now_us` and it did not answer) out of the directory with its
    /// sessions, and records `ends` (each session's last events) in their
    /// histories. Only the replica whose statements find the sessions still
    /// in the directory records them, so when several find the replica lost
    /// at once each session's end is recorded once; and nothing happens if
    /// the replica renewed its lease meanwhile.
    pub async fn claim_lost_replica(
        &self,
        id: &str,
        now_us: i64,
        ends: Vec<RecordedEvent>,
    ) -> Result<(), WriteError> {
        // The replica's row first: its lock makes a second claim wait for
        // the first, and then find nothing left to claim.
        let mut statements = vec![
            Statement::new("DELETE FROM stepd_replicas WHERE id = $1 AND lease_until_us < $2")
                .bind(id)
                .bind(now_us),
        ];
        for end in ends {
            let bytes = i64::try_from(end.event.len()).unwrap_or(i64::MAX);
            statements.push(
                Statement::new(
                    "INSERT INTO session_events (session_id, seq, channel, time_us, bytes, event) \
                     SELECT $1, $2, $3, $4, $5, $6 \
                     WHERE EXISTS (SELECT 1 FROM stepd_sessions WHERE session_id = $1 AND replica_id = $7) \
                     AND NOT EXISTS (SELECT 1 FROM stepd_replicas WHERE id = $7) \
                     ON CONFLICT (session_id, seq) DO NOTHING",
                )
                .bind(end.session_id.as_str())
                .bind(i64::try_from(end.seq).unwrap_or(i64::MAX))
                .bind(i64::from(end.channel))
                .bind(end.time_us)
                .bind(bytes)
                .bind(end.event)
                .bind(id),
            );
        }
        statements.push(
            Statement::new(
                "DELETE FROM stepd_sessions WHERE replica_id = $1 \
                 AND NOT EXISTS (SELECT 1 FROM stepd_replicas WHERE id = $1)",
            )
            .bind(id),
        );
        self.write("a lost replica's sessions", statements, &Within::internal())
            .await?;
        Ok(())
    }

    /// Makes the directory say that `replica_id` runs exactly `sessions`
    /// (after an outage, when what it recorded may have been lost).
    pub async fn reassert_sessions(
        &self,
        replica_id: &str,
        sessions: &[String],
        now_us: i64,
    ) -> Result<(), WriteError> {
        let mut statements = vec![
            Statement::new("DELETE FROM stepd_sessions WHERE replica_id = $1").bind(replica_id),
        ];
        for session in sessions {
            statements.push(
                Statement::new(
                    "INSERT INTO stepd_sessions (session_id, replica_id, started_us) \
                     VALUES ($1, $2, $3) ON CONFLICT (session_id) DO UPDATE \
                     SET replica_id = excluded.replica_id",
                )
                .bind(session.as_str())
                .bind(replica_id)
                .bind(now_us),
            );
        }
        self.write("this replica's sessions", statements, &Within::internal())
            .await?;
        Ok(())
    }

    /// The highest seq recorded of a session's history (0 when none).
    pub async fn last_recorded_seq(&self, session_id: &str) -> Result<u64, sqlx::Error> {
        let statement = Statement::new(
            "SELECT CAST(COALESCE(MAX(seq), 0) AS BIGINT) AS n FROM session_events \
             WHERE session_id = $1",
        )
        .bind(session_id);
        let rows: Vec<Number> = self.pool.fetch(statement).await?;
        Ok(rows.first().map_or(0, |n| u64::try_from(n.0).unwrap_or(0)))
    }

    /// Every registered replica, this one included.
    pub async fn replicas(&self) -> Result<Vec<Replica>, sqlx::Error> {
        self.pool
            .fetch(Statement::new(
                "SELECT id, address, started_us, lease_until_us FROM stepd_replicas ORDER BY id",
            ))
            .await
    }

    /// Records that `replica_id` runs `session_id`.
    pub async fn own_session(
        &self,
        session_id: &str,
        replica_id: &str,
        started_us: i64,
    ) -> Result<(), WriteError> {
        let statement = Statement::new(
            "INSERT INTO stepd_sessions (session_id, replica_id, started_us) \
             VALUES ($1, $2, $3) ON CONFLICT (session_id) DO NOTHING",
        )
        .bind(session_id)
        .bind(replica_id)
        .bind(started_us);
        self.write("the session's owner", vec![statement], &Within::internal())
            .await?;
        Ok(())
    }

    /// Forgets an ended session.
    pub async fn disown_session(&self, session_id: &str) -> Result<(), WriteError> {
        let statement =
            Statement::new("DELETE FROM stepd_sessions WHERE session_id = $1").bind(session_id);
        self.write("the ended session", vec![statement], &Within::internal())
            .await?;
        Ok(())
    }

    /// Which replica runs each live session.
    pub async fn owned_sessions(&self) -> Result<Vec<Owned>, sqlx::Error> {
        self.pool
            .fetch(Statement::new(
                "SELECT session_id, replica_id FROM stepd_sessions ORDER BY session_id",
            ))
            .await
    }
}
