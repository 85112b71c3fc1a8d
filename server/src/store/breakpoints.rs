//! Breakpoint rows.

use prost::Message as _;
use sqlx::Row as _;
use stepd_proto::v1::BreakpointSpec;

use super::{Queued, Statement, Store, WriteError};

/// A breakpoint as stored.
#[derive(Debug, Clone)]
pub struct StoredBreakpoint {
    /// Row id; the API id is `bp-<id>`.
    pub id: i64,
    /// The spec as last set.
    pub spec: BreakpointSpec,
    /// Hits so far.
    pub hit_count: u64,
    /// Creation time, microseconds since the Unix epoch.
    pub created_at_us: i64,
    /// Last change, microseconds since the Unix epoch.
    pub updated_at_us: i64,
    /// The identity that added it.
    pub created_by: String,
    /// The identity that last changed it.
    pub updated_by: String,
}

fn from_row(row: &sqlx::sqlite::SqliteRow) -> Result<StoredBreakpoint, sqlx::Error> {
    let blob: Vec<u8> = row.try_get("spec")?;
    let spec = BreakpointSpec::decode(blob.as_slice()).map_err(|e| sqlx::Error::ColumnDecode {
        index: "spec".into(),
        source: Box::new(e),
    })?;
    let hits: i64 = row.try_get("hit_count")?;
    Ok(StoredBreakpoint {
        id: row.try_get("id")?,
        spec,
        hit_count: u64::try_from(hits).unwrap_or(0),
        created_at_us: row.try_get("created_at_us")?,
        updated_at_us: row.try_get("updated_at_us")?,
        created_by: row.try_get("created_by")?,
        updated_by: row.try_get("updated_by")?,
    })
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
        self.queue_insert(spec, now_us, by).await.done().await
    }

    /// Hands the insert of a breakpoint to the writer, behind every write
    /// handed over before it; the answer's `done` gives the breakpoint with
    /// its new id once it is durable.
    pub async fn queue_insert(&self, spec: &BreakpointSpec, now_us: i64, by: &str) -> QueuedInsert {
        let statement = Statement::new(
            "INSERT INTO breakpoints (spec, created_at_us, updated_at_us, created_by, updated_by) \
             VALUES (?, ?, ?, ?, ?) \
             RETURNING id, spec, hit_count, created_at_us, updated_at_us, created_by, updated_by",
        )
        .bind(spec.encode_to_vec())
        .bind(now_us)
        .bind(now_us)
        .bind(by)
        .bind(by);
        QueuedInsert(self.queue("the new breakpoint", vec![statement]).await)
    }

    /// Every breakpoint, in creation order.
    pub async fn list_breakpoints(&self) -> Result<Vec<StoredBreakpoint>, sqlx::Error> {
        let rows = sqlx::query("SELECT * FROM breakpoints ORDER BY id")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(from_row).collect()
    }

    /// One breakpoint.
    pub async fn get_breakpoint(&self, id: i64) -> Result<Option<StoredBreakpoint>, sqlx::Error> {
        let row = sqlx::query("SELECT * FROM breakpoints WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(from_row).transpose()
    }

    /// Replaces a breakpoint's spec; `None` when it does not exist.
    pub async fn update_breakpoint(
        &self,
        id: i64,
        spec: &BreakpointSpec,
        now_us: i64,
        by: &str,
    ) -> Result<Option<StoredBreakpoint>, WriteError> {
        let statement = Statement::new(
            "UPDATE breakpoints SET spec = ?, updated_at_us = ?, updated_by = ? WHERE id = ? \
             RETURNING id, spec, hit_count, created_at_us, updated_at_us, created_by, updated_by",
        )
        .bind(spec.encode_to_vec())
        .bind(now_us)
        .bind(by)
        .bind(id);
        let rows = self
            .write("the changed breakpoint", vec![statement])
            .await?;
        rows.first()
            .map(from_row)
            .transpose()
            .map_err(|err| self.write_error("the changed breakpoint", err))
    }

    /// Deletes a breakpoint, returning it as it was; `None` when it did not exist.
    pub async fn delete_breakpoint(&self, id: i64) -> Result<Option<StoredBreakpoint>, WriteError> {
        let statement = Statement::new(
            "DELETE FROM breakpoints WHERE id = ? \
             RETURNING id, spec, hit_count, created_at_us, updated_at_us, created_by, updated_by",
        )
        .bind(id);
        let rows = self
            .write("the breakpoint's removal", vec![statement])
            .await?;
        rows.first()
            .map(from_row)
            .transpose()
            .map_err(|err| self.write_error("the breakpoint's removal", err))
    }

    /// Adds hits to breakpoints' counts, all or none (nothing for a
    /// breakpoint that is gone).
    pub async fn add_hits(&self, hits: &[(i64, u64)]) -> Result<(), WriteError> {
        let statements = hits
            .iter()
            .map(|&(id, hits)| {
                Statement::new("UPDATE breakpoints SET hit_count = hit_count + ? WHERE id = ?")
                    .bind(i64::try_from(hits).unwrap_or(i64::MAX))
                    .bind(id)
            })
            .collect();
        self.write("breakpoint hits", statements).await?;
        Ok(())
    }

    fn write_error(&self, what: &'static str, source: sqlx::Error) -> WriteError {
        WriteError {
            what,
            data_dir: self.data_dir.clone(),
            source,
        }
    }
}

/// An insert handed to the writer.
pub struct QueuedInsert(Queued);

impl QueuedInsert {
    /// The new breakpoint, once it is durable.
    pub async fn done(self) -> Result<StoredBreakpoint, WriteError> {
        let (what, data_dir) = (self.0.what, self.0.data_dir.clone());
        let fail = |source| WriteError {
            what,
            data_dir: data_dir.clone(),
            source,
        };
        let rows = self.0.done().await?;
        let row = rows.first().ok_or_else(|| fail(sqlx::Error::RowNotFound))?;
        from_row(row).map_err(fail)
    }
}
