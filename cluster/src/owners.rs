//! Which peer runs each relayed session, and which relayed session holds
//! each pause: what forwarding looks up. A session missing here is this
//! replica's own (or unknown, which the local handlers answer); a session
//! whose replica was lost stays here, marked lost, so that it is answered
//! here and yet never taken for this replica's own (recorded in its history
//! or relayed to its peers as if it ran it).

use std::{
    collections::{HashMap, HashSet, VecDeque},
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
    /// Sessions whose replica was lost: ended here, answered here.
    lost: HashSet<String>,
    /// Pause key → its session, kept after the pause is resolved (until
    /// the session ends): a late answer still goes to the owner, which says
    /// ALREADY_ANSWERED, not to this replica, which never held it.
    pauses: HashMap<String, String>,
    /// The pauses their replica holds, as it last said (key → session and
    /// thread): what a lost replica's sessions resolve in their history.
    open: HashMap<String, (String, i64)>,
    /// Ended relayed sessions, oldest first.
    ended: VecDeque<String>,
}

impl Maps {
    /// Remembers an ended session, forgetting the oldest past the bound.
    fn end(&mut self, session: String) {
        self.ended.push_back(session);
        if self.ended.len() > ENDED_KEPT
            && let Some(old) = self.ended.pop_front()
        {
            self.sessions.remove(&old);
            self.lost.remove(&old);
        }
    }
}

impl Owners {
    fn lock(&self) -> MutexGuard<'_, Maps> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The replica that answers for `session_id`, when it is a peer (not
    /// one that was lost).
    pub(super) fn of_session(&self, session_id: &str) -> Option<Peer> {
        let maps = self.lock();
        if maps.lost.contains(session_id) {
            return None;
        }
        maps.sessions.get(session_id).cloned()
    }

    pub(super) fn of_pause(&self, key: &str) -> Option<Peer> {
        let maps = self.lock();
        let session = maps.pauses.get(key)?;
        if maps.lost.contains(session) {
            return None;
        }
        maps.sessions.get(session).cloned()
    }

    /// Whether a peer runs (or ran) `session_id`: what this replica must
    /// neither record nor relay as its own.
    pub(super) fn is_relayed(&self, session_id: &str) -> bool {
        self.lock().sessions.contains_key(session_id)
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
                    maps.open.insert(
                        pause.key.clone(),
                        (event.session_id.clone(), pause.thread_id),
                    );
                }
            }
            Some(Payload::PauseResolved(resolved)) => {
                maps.open.remove(&resolved.key);
            }
            Some(Payload::SessionEnded(_)) => {
                let session = event.session_id.clone();
                maps.pauses.retain(|_, s| *s != session);
                maps.open.retain(|_, (s, _)| *s != session);
                maps.end(session);
            }
            _ => {}
        }
    }

    /// The pauses a relayed session's replica still holds (key and
    /// thread), as `lose` would return them, changing nothing.
    pub(super) fn held_of(&self, session_id: &str) -> Vec<(String, i64)> {
        let maps = self.lock();
        if maps.lost.contains(session_id) {
            return Vec::new();
        }
        maps.open
            .iter()
            .filter(|(_, (session, _))| session == session_id)
            .map(|(key, (_, thread))| (key.clone(), *thread))
            .collect()
    }

    /// Marks a session of a replica that was lost: this replica answers
    /// for it from now on, as an ended session that is not its own.
    /// Returns the pauses its replica still held (key and thread).
    pub(super) fn lose(&self, session_id: &str) -> Vec<(String, i64)> {
        let mut maps = self.lock();
        if !maps.lost.insert(session_id.to_owned()) {
            return Vec::new();
        }
        maps.pauses.retain(|_, session| session != session_id);
        let mut held = Vec::new();
        maps.open.retain(|key, (session, thread)| {
            let of_it = session == session_id;
            if of_it {
                held.push((key.clone(), *thread));
            }
            !of_it
        });
        if !maps.ended.iter().any(|s| s == session_id) {
            maps.end(session_id.to_owned());
        }
        held
    }

    /// The relayed sessions `peer_id` runs, but those already lost.
    pub(super) fn sessions_of(&self, peer_id: &str) -> Vec<String> {
        let maps = self.lock();
        maps.sessions
            .iter()
            .filter(|(id, peer)| peer.id == peer_id && !maps.lost.contains(*id))
            .map(|(id, _)| id.clone())
            .collect()
    }
}
