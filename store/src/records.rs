//! Session records: each session's latest record, written by the replica
//! that runs it, so that any replica lists the sessions that ended on any
//! replica sharing the store.

use super::{
    Queued, Statement, Store, Within,
    backend::{Columns, Record},
};

/// One session's latest record.
#[derive(Debug, Clone)]
pub struct SessionRecord {
    pub session_id: String,
    /// The replica (instance id) that runs or ran it.
    pub replica_id: String,
    pub started_us: i64,
    /// 0 while it is not recorded as ended.
    pub ended_us: i64,
    /// The encoded `stepd.v1.Session`.
    pub record: Vec<u8>,
}

impl Record for SessionRecord {
    fn from_row(row: &dyn Columns) -> Result<Self, sqlx::Error> {
        Ok(Self {
            session_id: row.text("session_id")?,
            replica_id: row.text("replica_id")?,
            started_us: row.int("started_us")?,
            ended_us: row.int("ended_us")?,
            record: row.blob("record")?,
        })
    }
}

/// Which ended sessions to read.
#[derive(Debug, Clone)]
pub struct EndedQuery<'a> {
    /// The reading replica: its sessions not recorded as ended are live.
    pub own_id: &'a str,
    /// Only sessions that ended at or after this time (µs).
    pub since_us: i64,
    /// Only sessions that started at or before this time (µs).
    pub until_us: i64,
    /// Only sessions whose id sorts before this one ("" = from the newest).
    pub before_id: &'a str,
    pub limit: usize,
}

impl Store {
    /// Hands the latest records of some sessions to the writer; a record
    /// replaces the one kept of its session.
    pub async fn queue_session_records(&self, records: Vec<SessionRecord>) -> Queued {
        let statements = records
            .into_iter()
            .map(|r| {
                Statement::new(
                    "INSERT INTO session_records (session_id, replica_id, started_us, ended_us, record) \
                     VALUES ($1, $2, $3, $4, $5) \
                     ON CONFLICT (session_id) DO UPDATE SET replica_id = excluded.replica_id, \
                     ended_us = excluded.ended_us, record = excluded.record",
                )
                .bind(r.session_id.as_str())
                .bind(r.replica_id.as_str())
                .bind(r.started_us)
                .bind(r.ended_us)
                .bind(r.record)
            })
            .collect();
        self.queue("session records", statements, &Within::internal())
            .await
    }

    /// Sessions that ended, newest first: those recorded as ended, and
    /// those whose replica is neither the reader nor in the directory any
    /// more (it stopped before it could record their end).
    pub async fn ended_sessions(
        &self,
        query: &EndedQuery<'_>,
    ) -> Result<Vec<SessionRecord>, sqlx::Error> {
        let statement = Statement::new(
            "SELECT session_id, replica_id, started_us, ended_us, record FROM session_records \
             WHERE ($1 = '' OR session_id < $1) AND started_us <= $2 \
             AND ((ended_us > 0 AND ended_us >= $3) OR (ended_us = 0 AND replica_id <> $4 \
               AND replica_id NOT IN (SELECT id FROM stepd_replicas))) \
             ORDER BY session_id DESC LIMIT $5",
        )
        .bind(query.before_id)
        .bind(query.until_us)
        .bind(query.since_us)
        .bind(query.own_id)
        .bind(i64::try_from(query.limit).unwrap_or(i64::MAX));
        self.pool.fetch(statement).await
    }
}
