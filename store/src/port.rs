//! The store as the core's breakpoints see it (`stepd_core::breakpoints::
//! BreakpointStore`), and its failures as the typed errors clients get:
//! logged here, once, with where the database is (which clients are not told).

use stepd_core::{
    breakpoints::{
        BreakpointStore, Change, ChangeFeed, HitsRefused, StoreFuture, StoredBreakpoint,
    },
    error::{ApiError, ApiResult},
    within::Within,
};
use stepd_proto::v1::{BreakpointSpec, ErrorReason};

use super::{Changes, Store, WriteError};

/// A read the database refused, as the client gets it.
pub fn unavailable(err: sqlx::Error) -> ApiError {
    tracing::error!(error = %err, "store error");
    ApiError::new(ErrorReason::StoreUnavailable, format!("store: {err}"))
}

impl From<WriteError> for ApiError {
    /// A write that did not become durable. While the store is known to be
    /// down the outage was logged once, and each refusal is logged at debug.
    fn from(err: WriteError) -> Self {
        if err.source.is_store_down() {
            tracing::debug!(
                store = %err.place,
                error = %err.source,
                "could not store {}; the request is refused and nothing changed",
                err.what
            );
        } else {
            tracing::warn!(
                store = %err.place,
                error = %err.source,
                "could not store {}; the request is refused and nothing changed",
                err.what
            );
        }
        ApiError::new(
            ErrorReason::StoreUnavailable,
            format!("store: could not store {}: {}", err.what, err.source),
        )
    }
}

impl ChangeFeed for Changes {
    fn next(&mut self) -> StoreFuture<'_, Option<Change>> {
        Box::pin(Changes::next(self))
    }
}

impl BreakpointStore for Store {
    fn place(&self) -> &str {
        Store::place(self)
    }

    fn check_up(&self, what: &'static str) -> ApiResult<()> {
        Ok(Store::check_up(self, what)?)
    }

    fn is_closed(&self) -> bool {
        Store::is_closed(self)
    }

    fn list(&self) -> StoreFuture<'_, ApiResult<Vec<StoredBreakpoint>>> {
        Box::pin(async move { self.list_breakpoints().await.map_err(unavailable) })
    }

    fn get(&self, id: i64) -> StoreFuture<'_, ApiResult<Option<StoredBreakpoint>>> {
        Box::pin(async move { self.get_breakpoint(id).await.map_err(unavailable) })
    }

    // Two steps on purpose: the outer future hands the write over (which
    // fixes its place in the commit order), the inner one is its durability.
    #[allow(clippy::async_yields_async)]
    fn queue_insert<'a>(
        &'a self,
        spec: &'a BreakpointSpec,
        now_us: i64,
        by: &'a str,
        within: &'a Within,
    ) -> StoreFuture<'a, StoreFuture<'static, ApiResult<StoredBreakpoint>>> {
        Box::pin(async move {
            let queued = Store::queue_insert(self, spec, now_us, by, within).await;
            let done: StoreFuture<'static, _> = Box::pin(async move { Ok(queued.done().await?) });
            done
        })
    }

    fn update<'a>(
        &'a self,
        id: i64,
        spec: &'a BreakpointSpec,
        now_us: i64,
        by: &'a str,
        within: &'a Within,
    ) -> StoreFuture<'a, ApiResult<Option<StoredBreakpoint>>> {
        Box::pin(async move { Ok(self.update_breakpoint(id, spec, now_us, by, within).await?) })
    }

    fn delete<'a>(
        &'a self,
        id: i64,
        within: &'a Within,
    ) -> StoreFuture<'a, ApiResult<Option<StoredBreakpoint>>> {
        Box::pin(async move { Ok(self.delete_breakpoint(id, within).await?) })
    }

    fn add_hits<'a>(&'a self, hits: &'a [(i64, u64)]) -> StoreFuture<'a, Result<(), HitsRefused>> {
        Box::pin(async move {
            Store::add_hits(self, hits)
                .await
                .map_err(|err| HitsRefused {
                    place: err.place,
                    error: err.source.to_string(),
                })
        })
    }

    fn changes(&self) -> StoreFuture<'_, ApiResult<Option<Box<dyn ChangeFeed>>>> {
        Box::pin(async move {
            let changes = Store::changes(self).await.map_err(unavailable)?;
            Ok(changes.map(|c| Box::new(c) as Box<dyn ChangeFeed>))
        })
    }
}
