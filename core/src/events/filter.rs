//! Which events a subscriber asked for.

use std::{collections::HashSet, fmt, sync::Arc};

use stepd_proto::v1::{Event, EventChannel, Watch, event::Payload};

use crate::error::{ApiError, ApiResult};

/// A subscriber's filter: sessions and channels; empty sets mean "all".
#[derive(Debug, Clone, Default)]
pub struct Filter {
    sessions: HashSet<String>,
    /// Bit `1 << channel` for each selected channel; 0 = all.
    channels: u32,
    /// For a peer replica: only the sessions this daemon runs itself.
    own: Option<Own>,
}

/// Whether this daemon runs a session (rather than relaying another
/// replica's).
#[derive(Clone)]
pub struct Own(pub Arc<dyn Fn(&str) -> bool + Send + Sync>);

impl fmt::Debug for Own {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Own(..)")
    }
}

impl Filter {
    /// Refuses a Watch naming a channel stepd does not have: watching only
    /// an unknown channel would otherwise read as watching every channel.
    pub fn check(watch: &Watch) -> ApiResult<()> {
        match watch
            .channels
            .iter()
            .find(|c| EventChannel::try_from(**c).is_err())
        {
            Some(unknown) => Err(ApiError::invalid_field(
                "watch.channels",
                format!("no event channel {unknown}"),
            )),
            None => Ok(()),
        }
    }

    /// The filter a Watch asks for (one [`Filter::check`] let through).
    pub fn from_watch(watch: &Watch) -> Self {
        let channels = watch
            .channels
            .iter()
            .filter(|c| EventChannel::try_from(**c).is_ok_and(|c| c != EventChannel::Unspecified))
            .fold(0u32, |bits, c| bits | (1u32 << *c));
        Self {
            sessions: watch.session_ids.iter().cloned().collect(),
            channels,
            own: None,
        }
    }

    /// The same filter narrowed to the sessions `own` says this daemon
    /// runs, without daemon-level events: what a peer replica relays (it
    /// has its own breakpoints, and the other replicas' sessions from them).
    pub fn only_own(mut self, own: Own) -> Self {
        self.own = Some(own);
        self
    }

    /// Whether events of `session_id` pass the session part of the filter.
    /// Daemon-level events (empty id) always do, but for a peer replica.
    pub fn admits_session(&self, session_id: &str) -> bool {
        if let Some(own) = &self.own {
            return !session_id.is_empty()
                && (own.0)(session_id)
                && (self.sessions.is_empty() || self.sessions.contains(session_id));
        }
        session_id.is_empty() || self.sessions.is_empty() || self.sessions.contains(session_id)
    }

    /// Whether the event goes to this subscriber.
    pub fn admits(&self, event: &Event) -> bool {
        if !self.admits_session(&event.session_id) {
            return false;
        }
        match event.payload.as_ref().and_then(channel_of) {
            None => true,
            Some(channel) => self.channels == 0 || self.channels & (1u32 << channel as u32) != 0,
        }
    }

    /// The sessions asked for, empty meaning all.
    pub fn sessions(&self) -> &HashSet<String> {
        &self.sessions
    }
}

/// The channel of a payload; `None` for stream-control events that always pass.
pub fn channel_of(payload: &Payload) -> Option<EventChannel> {
    use EventChannel as C;
    Some(match payload {
        Payload::SessionStarted(_)
        | Payload::SessionUpdated(_)
        | Payload::SessionEnded(_)
        | Payload::ThreadChanged(_) => C::Lifecycle,
        Payload::Stopped(_)
        | Payload::Continued(_)
        | Payload::PauseResolved(_)
        | Payload::Stack(_)
        | Payload::EvalError(_)
        | Payload::Trace(_)
        | Payload::BreakpointSnapshot(_) => C::Execution,
        Payload::Output(_) => C::Output,
        Payload::BreakpointUpdated(_) => C::Breakpoints,
        Payload::Observed(_) | Payload::Enlighten(_) => C::Probe,
        Payload::Tap(_) => C::Inspector,
        Payload::Notification(_) => C::Notifications,
        Payload::Snapshot(_)
        | Payload::Gap(_)
        | Payload::Heartbeat(_)
        | Payload::Reconnect(_)
        | Payload::Error(_) => {
            return None;
        }
    })
}

#[cfg(test)]
mod tests {
    use stepd_proto::v1::Output;

    use super::*;

    fn event(session: &str, payload: Payload) -> Event {
        Event {
            session_id: session.into(),
            payload: Some(payload),
            ..Default::default()
        }
    }

    #[test]
    fn filters_by_session_and_channel() {
        let f = Filter::from_watch(&Watch {
            session_ids: vec!["s1".into()],
            channels: vec![EventChannel::Execution as i32],
            ..Default::default()
        });
        assert!(f.admits(&event("s1", Payload::Stopped(Box::default()))));
        assert!(!f.admits(&event("s2", Payload::Stopped(Box::default()))));
        assert!(!f.admits(&event("s1", Payload::Output(Output::default()))));
        assert!(f.admits(&event("s1", Payload::Gap(Default::default()))));
        assert!(Filter::default().admits(&event("s9", Payload::Output(Output::default()))));
    }

    #[test]
    fn an_unknown_channel_is_refused_rather_than_read_as_all() {
        let unknown = Watch {
            channels: vec![EventChannel::Execution as i32, 999],
            ..Default::default()
        };
        let err = Filter::check(&unknown).unwrap_err();
        assert_eq!(err.reason(), stepd_proto::v1::ErrorReason::InvalidArgument);
        assert!(Filter::check(&Watch::default()).is_ok());
    }
}
