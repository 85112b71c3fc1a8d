//! Where breakpoints persist, as the core sees it: the daemon's store
//! (SQLite or PostgreSQL, `stepd-store`) implements this port, so the core
//! never depends on a database. Every error arrives already typed: the store
//! logs what the client is not told.

use std::{future::Future, pin::Pin, sync::Arc};

use stepd_proto::v1::BreakpointSpec;

use crate::{error::ApiResult, within::Within};

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

/// A change another replica committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A breakpoint was added or its spec changed: read it again.
    Changed(i64),
    /// A breakpoint was removed.
    Removed(i64),
    /// Hits were added to a breakpoint's count.
    Hits { id: i64, added: u64 },
    /// The connection was lost and announcements may be missing: read
    /// every breakpoint again.
    Lost,
}

/// A future a store hands back; boxed, as the port is used as a trait object.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A batch of hits the store could not make durable (a full disk): the
/// batch is kept and written again later.
#[derive(Debug)]
pub struct HitsRefused {
    /// Where the database is (never told to clients).
    pub place: Arc<str>,
    /// Why.
    pub error: String,
}

/// The announcements of other replicas' changes, in commit order.
pub trait ChangeFeed: Send {
    /// The next change another replica made; `None` once the store is
    /// closed. A database that goes away is waited for; once it is back,
    /// `Lost`.
    fn next(&mut self) -> StoreFuture<'_, Option<Change>>;
}

/// The breakpoint rows of the daemon's store.
pub trait BreakpointStore: Send + Sync + 'static {
    /// Where the database is, for logs.
    fn place(&self) -> &str;

    /// Refuses at once while the store is known to be down (`what` is
    /// what was to be written).
    fn check_up(&self, what: &'static str) -> ApiResult<()>;

    /// Whether the store was closed (the daemon is stopping).
    fn is_closed(&self) -> bool;

    /// Every breakpoint, in creation order.
    fn list(&self) -> StoreFuture<'_, ApiResult<Vec<StoredBreakpoint>>>;

    /// One breakpoint.
    fn get(&self, id: i64) -> StoreFuture<'_, ApiResult<Option<StoredBreakpoint>>>;

    /// Hands the insert of a breakpoint to the writer, behind every write
    /// handed over before it; the future it gives is the breakpoint with its
    /// new id, once it is durable.
    fn queue_insert<'a>(
        &'a self,
        spec: &'a BreakpointSpec,
        now_us: i64,
        by: &'a str,
        within: &'a Within,
    ) -> StoreFuture<'a, StoreFuture<'static, ApiResult<StoredBreakpoint>>>;

    /// Replaces a breakpoint's spec; `None` when it does not exist.
    fn update<'a>(
        &'a self,
        id: i64,
        spec: &'a BreakpointSpec,
        now_us: i64,
        by: &'a str,
        within: &'a Within,
    ) -> StoreFuture<'a, ApiResult<Option<StoredBreakpoint>>>;

    /// Deletes a breakpoint, returning it as it was; `None` when it did
    /// not exist.
    fn delete<'a>(
        &'a self,
        id: i64,
        within: &'a Within,
    ) -> StoreFuture<'a, ApiResult<Option<StoredBreakpoint>>>;

    /// Adds hits to breakpoints' counts, all or none.
    fn add_hits<'a>(&'a self, hits: &'a [(i64, u64)]) -> StoreFuture<'a, Result<(), HitsRefused>>;

    /// Other replicas' changes, when the database is shared with them.
    fn changes(&self) -> StoreFuture<'_, ApiResult<Option<Box<dyn ChangeFeed>>>>;
}
