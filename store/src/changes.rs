//! Breakpoint changes made by other replicas, as PostgreSQL announces them
//! (`LISTEN stepd_breakpoints`, sent by the trigger of migration 0003 on
//! every commit). A replica's own changes carry its `application_name` and
//! are skipped: it has published them already.

use std::time::Duration;

use serde::Deserialize;
use sqlx::postgres::PgListener;
pub use stepd_core::breakpoints::Change;

/// The channel the trigger notifies.
const CHANNEL: &str = "stepd_breakpoints";

/// How long to wait before listening again after the database refused.
const RETRY: Duration = Duration::from_millis(500);

/// The trigger's payload.
#[derive(Deserialize)]
struct Payload {
    op: String,
    id: i64,
    delta: i64,
    from: String,
}

/// The announcements of other replicas' changes, in commit order.
pub struct Changes {
    pool: sqlx::PgPool,
    listener: PgListener,
    origin: String,
}

impl Changes {
    pub(super) async fn listen(pool: &sqlx::PgPool, origin: &str) -> Result<Self, sqlx::Error> {
        Ok(Self {
            pool: pool.clone(),
            listener: listener(pool).await?,
            origin: origin.to_owned(),
        })
    }

    /// The next change another replica made; `None` once the store is
    /// closed. A database that goes away is waited for; once it is back,
    /// `Lost`.
    pub async fn next(&mut self) -> Option<Change> {
        loop {
            match self.listener.try_recv().await {
                Ok(Some(notification)) => {
                    if let Some(change) = parse(notification.payload(), &self.origin) {
                        return Some(change);
                    }
                }
                // sqlx has connected and listens again; what was sent
                // meanwhile is gone.
                Ok(None) => return Some(Change::Lost),
                // The daemon is stopping.
                Err(_) if self.pool.is_closed() => return None,
                Err(err) => {
                    tracing::warn!(error = %err, "lost the breakpoint changes of other replicas; listening again");
                    loop {
                        tokio::time::sleep(RETRY).await;
                        if self.pool.is_closed() {
                            return None;
                        }
                        if let Ok(fresh) = listener(&self.pool).await {
                            self.listener = fresh;
                            return Some(Change::Lost);
                        }
                    }
                }
            }
        }
    }
}

async fn listener(pool: &sqlx::PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    Ok(listener)
}

/// The change a payload announces; None for this replica's own, and for a
/// payload stepd did not write.
fn parse(payload: &str, origin: &str) -> Option<Change> {
    let payload: Payload = serde_json::from_str(payload).ok()?;
    if payload.from == origin {
        return None;
    }
    Some(match payload.op.as_str() {
        "INSERT" | "UPDATE" => Change::Changed(payload.id),
        "DELETE" => Change::Removed(payload.id),
        "HIT" => Change::Hits {
            id: payload.id,
            added: u64::try_from(payload.delta).unwrap_or(0),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::{Change, parse};

    #[test]
    fn payloads_name_the_change_and_own_changes_are_skipped() {
        let from =
            |op: &str, from: &str| format!(r#"{{"op":"{op}","id":7,"delta":3,"from":"{from}"}}"#);
        assert_eq!(parse(&from("INSERT", "b"), "a"), Some(Change::Changed(7)));
        assert_eq!(parse(&from("UPDATE", "b"), "a"), Some(Change::Changed(7)));
        assert_eq!(parse(&from("DELETE", "b"), "a"), Some(Change::Removed(7)));
        assert_eq!(
            parse(&from("HIT", "b"), "a"),
            Some(Change::Hits { id: 7, added: 3 })
        );
        assert_eq!(parse(&from("INSERT", "a"), "a"), None);
        assert_eq!(parse("not json", "a"), None);
        assert_eq!(parse(&from("TRUNCATE", "b"), "a"), None);
    }
}
