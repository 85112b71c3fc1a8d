//! Reading a session's history a page at a time.

use prost::Message as _;
use stepd_proto::v1::{ErrorReason, Event, EventChannel, HistoryDropped};

use super::History;
use stepd_core::{
    error::{ApiError, ApiResult},
    time::timestamp_from_us,
};

/// Events in an answer when the request does not say.
const DEFAULT_PAGE: usize = 100;
/// The most events in an answer.
const MAX_PAGE: usize = 1000;

/// One page of a session's history.
pub struct Page {
    pub events: Vec<Event>,
    /// Empty on the last page.
    pub next_page_token: String,
    pub dropped: Option<HistoryDropped>,
}

impl History {
    /// The events of `session_id` after `page_token`, of `channels` (all when
    /// empty), at most `page_size` (0 = 100, capped at 1000) and `budget`
    /// bytes, always at least one.
    pub async fn page(
        &self,
        session_id: &str,
        channels: &[i32],
        page_size: u32,
        page_token: &str,
        budget: usize,
    ) -> ApiResult<Page> {
        if session_id.is_empty() {
            return Err(ApiError::invalid_field("session_id", "is required"));
        }
        if let Some(bad) = channels
            .iter()
            .find(|c| EventChannel::try_from(**c).is_err() || **c == 0)
        {
            return Err(ApiError::invalid_field(
                "channels",
                format!("{bad} is not an EventChannel"),
            ));
        }
        let after = match page_token {
            "" => 0,
            token => parse_token(token).ok_or_else(|| {
                ApiError::invalid_field(
                    "page_token",
                    format!(
                        "{} is not a page token from GetSessionHistory",
                        stepd_core::error::quote(token)
                    ),
                )
            })?,
        };
        let size = match page_size as usize {
            0 => DEFAULT_PAGE,
            n => n.min(MAX_PAGE),
        };
        // What was dropped is read before the events: retention drops and
        // records in one transaction, so every event read after it is newer
        // than what it says was dropped.
        let dropped = self
            .store
            .history_dropped(session_id)
            .await
            .map_err(stepd_store::unavailable)?
            .map(|d| HistoryDropped {
                events: d.events,
                through_seq: d.through_seq,
                reason: d.reason,
                at: Some(timestamp_from_us(d.at_us)),
            });
        // One more than the page, to know whether another follows.
        let rows = self
            .store
            .session_events(session_id, channels, after, size + 1)
            .await
            .map_err(stepd_store::unavailable)?;
        // While recording, a session this daemon shows has a history, if
        // nothing of it is written yet (events are recorded a moment after
        // they happen).
        let shown =
            self.recorder.is_some() && self.bus.with_view(|v| v.session(session_id).is_some());
        if rows.is_empty()
            && after == 0
            && !shown
            && !self
                .store
                .has_history(session_id)
                .await
                .map_err(stepd_store::unavailable)?
        {
            return Err(ApiError::new(
                ErrorReason::SessionNotFound,
                format!(
                    "no history of session {}",
                    stepd_core::error::quote(session_id)
                ),
            )
            .with("session_id", stepd_core::error::clip(session_id)));
        }
        let more_rows = rows.len() > size;
        let events = rows
            .iter()
            .take(size)
            .map(|encoded| Event::decode(encoded.as_slice()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| {
                ApiError::internal(format!("a recorded event does not decode: {err}"))
            })?;
        let (events, more_bytes) = stepd_core::limits::page(events, size, budget);
        let more = more_rows || more_bytes;
        let next_page_token = match events.last() {
            Some(last) if more => format!("after-{}", last.seq),
            _ => String::new(),
        };
        Ok(Page {
            events,
            next_page_token,
            dropped,
        })
    }
}

fn parse_token(token: &str) -> Option<u64> {
    token.strip_prefix("after-")?.parse().ok()
}
