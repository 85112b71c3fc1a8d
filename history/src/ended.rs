//! Listing the sessions that ended, from the store: every replica's, a
//! page at a time, by labels and time.

use prost::Message as _;
use stepd_proto::v1::{EndReason, Session, SessionState};

use super::History;
use stepd_core::{
    breakpoints::LabelSelector,
    error::{ApiError, ApiResult},
};
use stepd_store::EndedQuery;

/// Sessions in an answer when the request does not say.
const DEFAULT_PAGE: usize = 100;
/// The most sessions in an answer.
const MAX_PAGE: usize = 1000;
/// Rows read at a time while the label selector leaves a page short.
const READ_AHEAD: usize = 256;
/// The most rows one call reads: a selector that matches few sessions
/// gets a short (even empty) page and a token to go on from, rather than a
/// scan of the whole table in one call.
pub(super) const MAX_SCAN: usize = 16 * READ_AHEAD;

/// What to list.
pub struct EndedFilter<'a> {
    pub selector: &'a LabelSelector,
    /// µs; `i64::MIN` = no bound.
    pub since_us: i64,
    /// µs; `i64::MAX` = no bound.
    pub until_us: i64,
    pub page_size: u32,
    pub page_token: &'a str,
}

impl History {
    /// A page of ended sessions, newest first, and the token of the next
    /// page (empty on the last).
    pub async fn ended(
        &self,
        filter: &EndedFilter<'_>,
        budget: usize,
    ) -> ApiResult<(Vec<Session>, String)> {
        let mut before = match filter.page_token {
            "" => String::new(),
            token => token
                .strip_prefix("before-")
                .filter(|id| !id.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| {
                    ApiError::invalid_field(
                        "page_token",
                        format!(
                            "{} is not a page token from ListEndedSessions",
                            stepd_core::error::quote(token)
                        ),
                    )
                })?,
        };
        let size = match filter.page_size as usize {
            0 => DEFAULT_PAGE,
            n => n.min(MAX_PAGE),
        };
        // One more than the page, to know whether another follows; the
        // selector is matched here, on the labels as shown.
        let mut matched = Vec::new();
        let (mut exhausted, mut scanned) = (false, 0);
        while matched.len() <= size && !exhausted && scanned < MAX_SCAN {
            let rows = self
                .store
                .ended_sessions(&EndedQuery {
                    own_id: self.bus.instance_id(),
                    since_us: filter.since_us,
                    until_us: filter.until_us,
                    before_id: &before,
                    limit: READ_AHEAD,
                })
                .await
                .map_err(stepd_store::unavailable)?;
            exhausted = rows.len() < READ_AHEAD;
            scanned += rows.len();
            if let Some(last) = rows.last() {
                before.clone_from(&last.session_id);
            }
            for row in rows {
                let mut session = Session::decode(row.record.as_slice()).map_err(|err| {
                    ApiError::internal(format!("a recorded session does not decode: {err}"))
                })?;
                if row.ended_us == 0 {
                    // Its replica stopped before it could record the end.
                    session.state = SessionState::Ended.into();
                    session.end_reason = EndReason::ReplicaLost.into();
                    session.end_detail = format!(
                        "replica {} stopped without recording the session's end",
                        row.replica_id
                    );
                    session.threads.clear();
                }
                if filter.selector.matches(&session.labels) {
                    matched.push(session);
                }
            }
        }
        let more_rows = matched.len() > size;
        // Stopped at the scan's bound with the page short: the next call
        // goes on after the last row read.
        let cut_short = !more_rows && !exhausted;
        matched.truncate(size);
        let (sessions, more_bytes) = stepd_core::limits::page(matched, size, budget);
        let next = match sessions.last() {
            Some(last) if more_rows || more_bytes => format!("before-{}", last.id),
            _ if cut_short => format!("before-{before}"),
            _ => String::new(),
        };
        Ok((sessions, next))
    }
}
