//! Breakpoint rows.

use prost::Message as _;
use sqlx::Row as _;
use stepd_proto::v1::BreakpointSpec;

use super::Store;

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
    })
}

impl Store {
    /// Inserts a breakpoint and returns it with its new id.
    pub async fn insert_breakpoint(
        &self,
        spec: &BreakpointSpec,
        now_us: i64,
    ) -> Result<StoredBreakpoint, sqlx::Error> {
        let row = sqlx::query(
            "INSERT INTO breakpoints (spec, created_at_us, updated_at_us) VALUES (?, ?, ?) \
             RETURNING id, spec, hit_count, created_at_us, updated_at_us",
        )
        .bind(spec.encode_to_vec())
        .bind(now_us)
        .bind(now_us)
        .fetch_one(&self.pool)
        .await?;
        from_row(&row)
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
    ) -> Result<Option<StoredBreakpoint>, sqlx::Error> {
        let row = sqlx::query(
            "UPDATE breakpoints SET spec = ?, updated_at_us = ? WHERE id = ? \
             RETURNING id, spec, hit_count, created_at_us, updated_at_us",
        )
        .bind(spec.encode_to_vec())
        .bind(now_us)
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(from_row).transpose()
    }

    /// Deletes a breakpoint, returning it as it was; `None` when it did not exist.
    pub async fn delete_breakpoint(
        &self,
        id: i64,
    ) -> Result<Option<StoredBreakpoint>, sqlx::Error> {
        let row = sqlx::query(
            "DELETE FROM breakpoints WHERE id = ? \
             RETURNING id, spec, hit_count, created_at_us, updated_at_us",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(from_row).transpose()
    }

    /// Adds `hits` to a breakpoint's count (nothing when it is gone).
    pub async fn add_hits(&self, id: i64, hits: u64) -> Result<(), sqlx::Error> {
        sqlx::query("UPDATE breakpoints SET hit_count = hit_count + ? WHERE id = ?")
            .bind(i64::try_from(hits).unwrap_or(i64::MAX))
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
