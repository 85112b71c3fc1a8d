//! Which peer runs each relayed session, and which relayed session holds
//! each pause: what forwarding looks up. A session missing here is this
//! replica's own (or unknown, which the local handlers answer).

use std::{
    collections::{HashMap, VecDeque},
    sync::{Mutex, MutexGuard},
};

use stepd_proto::v1::{Event, event::Payload};

use super::Peer;

#[derive(Debug, Default)]
pub(super) struct Owners(Mutex<Maps>);

/// Ended relayed sessions remembered, as the event view keeps ended
/// sessions: their events are still being recorded and read elsewhere, and
/// calls about them still go to their replica.
const ENDED_KEPT: usize = 4096;

#[derive(Debug, Default)]
struct Maps {
    sessions: HashMap<String, Peer>,
    /// Pause key → its session, kept after the pause is resolved (until
    /// the session ends): a late answer still goes to the owner, which says
    /// ALREADY_ANSWERED, not to this replica, which never held it.
    pauses: HashMap<String, String>,
    /// Ended relayed sessions, oldest first.
    ended: VecDeque<String>,
}

impl Owners {
    fn lock(&self) -> MutexGuard<'_, Maps> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn of_session(&self, session_id: &str) -> Option<Peer> {
        self.lock().sessions.get(session_id).cloned()
    }

    pub(super) fn of_pause(&self, key: &str) -> Option<Peer> {
        let maps = self.lock();
        let session = maps.pauses.get(key)?;
        maps.sessions.get(session).cloned()
    }

    /// Takes in a relayed event before it is published here, so a client
    /// that sees it can already be forwarded.
    pub(super) fn note(&self, peer: &Peer, event: &Event) {
        let mut maps = self.lock();
        if !maps.sessions.contains_key(&event.session_id) {
            maps.sessions.insert(event.session_id.clone(), peer.clone());
        }
        match &event.payload {
            Some(Payload::Stopped(stopped)) => {
                if let Some(pause) = &stopped.pause {
                    maps.pauses
                        .insert(pause.key.clone(), event.session_id.clone());
                }
            }
            Some(Payload::SessionEnded(_)) => {
                let session = event.session_id.clone();
                maps.pauses.retain(|_, s| *s != session);
                maps.ended.push_back(session);
                if maps.ended.len() > ENDED_KEPT
                    && let Some(old) = maps.ended.pop_front()
                {
                    maps.sessions.remove(&old);
                }
            }
            _ => {}
        }
    }

    /// Forgets a session of a replica that left: this replica answers
    /// for it from now on.
    pub(super) fn forget(&self, session_id: &str) {
        let mut maps = self.lock();
        maps.sessions.remove(session_id);
        maps.pauses.retain(|_, session| session != session_id);
        maps.ended.retain(|s| s != session_id);
    }

    /// The relayed sessions `peer_id` runs.
    pub(super) fn sessions_of(&self, peer_id: &str) -> Vec<String> {
        self.lock()
            .sessions
            .iter()
            .filter(|(_, peer)| peer.id == peer_id)
            .map(|(id, _)| id.clone())
            .collect()
    }
}
