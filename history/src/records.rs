//! The records of sessions whose life changed in a batch of the recorder:
//! each one's latest record, for listing ended sessions from the store
//! (`ended.rs`).

use std::collections::HashMap;

use prost::Message as _;
use stepd_proto::v1::{Event, Session, SessionState, event::Payload};

use stepd_core::{events::EventBus, time::us_from_timestamp};
use stepd_store::SessionRecord;

/// Sessions started, updated or ended in one batch, and their records as
/// the events carried them.
#[derive(Default)]
pub(super) struct Lives {
    /// Session id → the record its latest event carried (none for an end).
    changed: HashMap<String, Option<Session>>,
}

impl Lives {
    /// Notes `event` when it changes its session's record.
    pub(super) fn note(&mut self, event: &Event) {
        let carried = match &event.payload {
            Some(Payload::SessionStarted(s)) => s.session.clone(),
            Some(Payload::SessionUpdated(s)) => s.session.clone(),
            Some(Payload::SessionEnded(_)) => None,
            _ => return,
        };
        self.changed.insert(event.session_id.clone(), carried);
    }

    /// The rows to write: each session as the bus shows it now (at least
    /// as new as the batch), or as its event carried it when the bus has
    /// forgotten it already.
    pub(super) fn records(self, bus: &EventBus) -> Vec<SessionRecord> {
        if self.changed.is_empty() {
            return Vec::new();
        }
        let shown: Vec<(Option<Session>, Option<Session>)> = bus.with_view(|v| {
            self.changed
                .into_iter()
                .map(|(id, carried)| (v.session(&id), carried))
                .collect()
        });
        shown
            .into_iter()
            .filter_map(|(shown, carried)| shown.or(carried))
            .map(|session| SessionRecord {
                started_us: session.started_at.as_ref().map_or(0, us_from_timestamp),
                ended_us: if session.state == SessionState::Ended as i32 {
                    session
                        .ended_at
                        .as_ref()
                        .map_or(1, us_from_timestamp)
                        .max(1)
                } else {
                    0
                },
                session_id: session.id.clone(),
                replica_id: session.replica_id.clone(),
                record: session.encode_to_vec(),
            })
            .collect()
    }
}
