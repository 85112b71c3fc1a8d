//! The session directory: the replicas sharing the database, each with the
//! address its peers reach it on and the lease it renews, and which replica
//! runs which session.

use super::{
    Statement, Store, Within, WriteError,
    backend::{Columns, Record},
};

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

    /// Takes this replica out of the directory with its sessions (a clean
    /// shutdown: its peers need not wait for the lease).
    pub async fn retire_replica(&self, id: &str) -> Result<(), WriteError> {
        let statements = vec![
            Statement::new("DELETE FROM stepd_sessions WHERE replica_id = $1").bind(id),
            Statement::new("DELETE FROM stepd_replicas WHERE id = $1").bind(id),
        ];
        self.write("this replica's retirement", statements, &Within::internal())
            .await?;
        Ok(())
    }

    /// Forgets the replicas whose lease ran out before `now_us`, and their
    /// sessions.
    pub async fn drop_expired_replicas(&self, now_us: i64) -> Result<(), WriteError> {
        let statements = vec![
            Statement::new(
                "DELETE FROM stepd_sessions WHERE replica_id IN \
                 (SELECT id FROM stepd_replicas WHERE lease_until_us < $1)",
            )
            .bind(now_us),
            Statement::new("DELETE FROM stepd_replicas WHERE lease_until_us < $1").bind(now_us),
        ];
        self.write("the expired replicas", statements, &Within::internal())
            .await?;
        Ok(())
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
