//! Breakpoint rows.

use prost::Message as _;
use stepd_proto::v1::BreakpointSpec;

use stepd_core::breakpoints::StoredBreakpoint;

use super::{Queued, Statement, Store, Within, WriteError};

/// The columns every statement that returns breakpoints returns.
macro_rules! returning {
    () => {
        " RETURNING id, spec, hit_count, created_at_us, updated_at_us, created_by, updated_by"
    };
}

impl Store {
    /// Inserts a breakpoint and returns it with its new id, once it is
    /// durable.
    pub async fn insert_breakpoint(
        &self,
        spec: &BreakpointSpec,
        now_us: i64,
        by: &str,
    ) -> Result<StoredBreakpoint, WriteError> {
        self.queue_insert(spec, now_us, by, &Within::internal())
            .await
            .done()
            .await
    }

    /// Hands the insert of a breakpoint to the writer, behind every write
    /// handed over before it; the answer's `done` gives the breakpoint with
    /// its new id once it is durable.
    pub async fn queue_insert(
        &self,
        spec: &BreakpointSpec,
        now_us: i64,
        by: &str,
        within: &Within,
    ) -> QueuedInsert {
        let statement = Statement::new(concat!(
            "INSERT INTO breakpoints (spec, created_at_us, updated_at_us, created_by, updated_by) \
             VALUES ($1, $2, $3, $4, $5)",
            returning!()
        ))
        .bind(spec.encode_to_vec())
        .bind(now_us)
        .bind(now_us)
        .bind(by)
        .bind(by);
        QueuedInsert(
            self.queue("the new breakpoint", vec![statement], within)
                .await,
        )
    }

    /// Every breakpoint, in creation order.
    pub async fn list_breakpoints(&self) -> Result<Vec<StoredBreakpoint>, sqlx::Error> {
        self.pool
            .fetch(Statement::new("SELECT * FROM breakpoints ORDER BY id"))
            .await
    }

    /// One breakpoint.
    pub async fn get_breakpoint(&self, id: i64) -> Result<Option<StoredBreakpoint>, sqlx::Error> {
        let statement = Statement::new("SELECT * FROM breakpoints WHERE id = $1").bind(id);
        Ok(self.pool.fetch(statement).await?.pop())
    }

    /// Replaces a breakpoint's spec; `None` when it does not exist.
    pub async fn update_breakpoint(
        &self,
        id: i64,
        spec: &BreakpointSpec,
        now_us: i64,
        by: &str,
        within: &Within,
    ) -> Result<Option<StoredBreakpoint>, WriteError> {
        let statement = Statement::new(concat!(
            "UPDATE breakpoints SET spec = $1, updated_at_us = $2, updated_by = $3 WHERE id = $4",
            returning!()
        ))
        .bind(spec.encode_to_vec())
        .bind(now_us)
        .bind(by)
        .bind(id);
        Ok(self
            .write("the changed breakpoint", vec![statement], within)
            .await?
            .pop())
    }

    /// Deletes a breakpoint, returning it as it was; `None` when it did not exist.
    pub async fn delete_breakpoint(
        &self,
        id: i64,
        within: &Within,
    ) -> Result<Option<StoredBreakpoint>, WriteError> {
        let statement = Statement::new(concat!(
            "DELETE FROM breakpoints WHERE id = $1",
            returning!()
        ))
        .bind(id);
        Ok(self
            .write("the breakpoint's removal", vec![statement], within)
            .await?
            .pop())
    }

    /// Adds hits to breakpoints' counts, all or none (nothing for a
    /// breakpoint that is gone).
    pub async fn add_hits(&self, hits: &[(i64, u64)]) -> Result<(), WriteError> {
        let statements = hits
            .iter()
            .map(|&(id, hits)| {
                Statement::new("UPDATE breakpoints SET hit_count = hit_count + $1 WHERE id = $2")
                    .bind(i64::try_from(hits).unwrap_or(i64::MAX))
                    .bind(id)
            })
            .collect();
        self.write("breakpoint hits", statements, &Within::internal())
            .await?;
        Ok(())
    }
}

/// An insert handed to the writer.
pub struct QueuedInsert(Queued);

impl QueuedInsert {
    /// The new breakpoint, once it is durable.
    pub async fn done(self) -> Result<StoredBreakpoint, WriteError> {
        let (what, place) = (self.0.what, self.0.place.clone());
        self.0.done().await?.pop().ok_or(WriteError {
            what,
            place,
            source: super::Failure::of(sqlx::Error::RowNotFound),
        })
    }
}
