//! The lease: this replica renews its row in the directory a few times a
//! lease, follows every live peer's events, and ends here the sessions of
//! a peer that is lost: one whose lease ran out *and* that does not answer
//! on its address. A database that was away makes every lease run out at
//! once; the replicas then still answer each other, so none loses the
//! others' sessions, and each writes its own sessions back into the
//! directory. It also keeps the directory's record of which sessions this
//! replica runs.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use stepd_proto::v1::{
    CommandKind, EndReason, Event, EventChannel, PauseResolved, PingRequest, SessionEnded,
    SessionState, Watch, daemon_service_client::DaemonServiceClient, event::Payload,
};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::{Cluster, Peer, relay};
use stepd_core::{
    events::Filter,
    time::{now_us, timestamp_from_us},
};
use stepd_store::RETIRED;

/// Renewals per lease: one may fail and the lease still holds.
const RENEWALS_PER_LEASE: u32 = 3;

/// How long a peer whose lease ran out has to answer before it is lost.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// Who resolves the pauses of a lost replica's sessions.
const LOST_BY: &str = "replica-lost";

/// Who resolves them when it shut down cleanly (as its own sessions say).
const SHUTDOWN_BY: &str = "daemon-shutdown";

pub(super) async fn keep(cluster: Arc<Cluster>) {
    let every = (cluster.lease / RENEWALS_PER_LEASE).max(Duration::from_millis(50));
    let mut relays: HashMap<String, (Peer, CancellationToken)> = HashMap::new();
    loop {
        // When the first live peer's lease runs out, unless it renews first.
        let mut first_expiry_us = None;
        match cluster.renew().await {
            Ok(lapsed) => {
                if lapsed || cluster.unsure.swap(false, Ordering::Relaxed) {
                    reassert(&cluster).await;
                }
            }
            Err(err) => tracing::warn!(error = %err, "could not renew this replica's lease"),
        }
        let now = now_us();
        // A directory that cannot be read says nothing about the peers:
        // they keep their sessions until it can.
        match cluster.store.replicas().await {
            Ok(replicas) => {
                let listed: HashSet<String> = replicas.iter().map(|r| r.id.clone()).collect();
                let mut live: HashMap<String, Peer> = HashMap::new();
                let mut lapsed = Vec::new();
                for r in replicas.into_iter().filter(|r| r.id != cluster.id) {
                    let peer = Peer {
                        id: r.id,
                        address: r.address,
                    };
                    if r.lease_until_us >= now {
                        first_expiry_us = Some(
                            first_expiry_us
                                .map_or(r.lease_until_us, |f: i64| f.min(r.lease_until_us)),
                        );
                        live.insert(peer.id.clone(), peer);
                    } else {
                        lapsed.push((peer, r.lease_until_us == RETIRED));
                    }
                }
                // A followed peer gone from the directory retired (its
                // sessions ended on its relay) or was found lost elsewhere.
                lapsed.extend(
                    relays
                        .iter()
                        .filter(|(id, _)| !listed.contains(*id))
                        .map(|(_, (peer, _))| (peer.clone(), false)),
                );
                // Asked all at once: several dead peers must not hold this
                // replica's own renewal up for their timeouts one by one.
                let mut asked = tokio::task::JoinSet::new();
                for (i, (peer, _)) in lapsed.iter().enumerate() {
                    let (cluster, peer) = (cluster.clone(), peer.clone());
                    asked.spawn(async move { (i, answers(&cluster, &peer).await) });
                }
                let mut answered = vec![false; lapsed.len()];
                while let Some(Ok((i, yes))) = asked.join_next().await {
                    answered[i] = yes;
                }
                for ((peer, retired), answered) in lapsed.into_iter().zip(answered) {
                    if answered {
                        live.insert(peer.id.clone(), peer);
                        continue;
                    }
                    if let Some((_, stop)) = relays.remove(&peer.id) {
                        stop.cancel();
                    }
                    lost(&cluster, &peer, now, retired).await;
                }
                *cluster.live.lock().unwrap_or_else(|e| e.into_inner()) = live
                    .values()
                    .map(|p| (p.id.replace('-', ""), p.clone()))
                    .collect();
                for (id, peer) in &live {
                    if !relays.contains_key(id) {
                        let stop = cluster.stop.child_token();
                        tokio::spawn(relay::follow(cluster.clone(), peer.clone(), stop.clone()));
                        relays.insert(id.clone(), (peer.clone(), stop));
                    }
                }
            }
            Err(err) => tracing::warn!(error = %err, "could not read the session directory"),
        }
        tokio::select! {
            () = cluster.stop.cancelled() => return,
            () = tokio::time::sleep(next_look(every, first_expiry_us, now_us())) => {}
        }
    }
}

/// Whether `peer` answers on its address as itself (a new process there
/// is another replica).
async fn answers(cluster: &Cluster, peer: &Peer) -> bool {
    let Ok(channel) = cluster.peers.channel(peer) else {
        return false;
    };
    let mut request = tonic::Request::new(PingRequest::default());
    *request.metadata_mut() =
        tonic::metadata::MetadataMap::from_headers(cluster.peers.headers(None));
    request.set_timeout(ANSWER_WITHIN);
    let mut client = DaemonServiceClient::new(channel);
    let ping = client.ping(request);
    match tokio::time::timeout(ANSWER_WITHIN, ping).await {
        Ok(Ok(pong)) => pong.into_inner().instance_id == peer.id,
        _ => false,
    }
}

/// Writes the directory's record of this replica's sessions whole, after
/// its lease ran out (peers may have found it lost) or a write of it failed.
async fn reassert(cluster: &Cluster) {
    let own: Vec<String> = cluster.bus.with_view(|v| {
        v.sessions(false)
            .into_iter()
            .filter(|s| s.state != SessionState::Ended as i32)
            .map(|s| s.id)
            .filter(|id| cluster.runs(id))
            .collect()
    });
    match cluster
        .store
        .reassert_sessions(&cluster.id, &own, now_us())
        .await
    {
        Ok(()) => tracing::info!(
            sessions = own.len(),
            "this replica's sessions are in the directory again"
        ),
        Err(err) => {
            cluster.unsure.store(true, Ordering::Relaxed);
            tracing::warn!(error = %err, "could not write this replica's sessions in the directory");
        }
    }
}

/// How long to wait before the next renewal and look at the directory: a
/// renewal period, or less when a peer's lease runs out sooner, so a dead
/// peer's sessions end when its lease does, not up to a period later.
fn next_look(every: Duration, first_expiry_us: Option<i64>, now_us: i64) -> Duration {
    first_expiry_us.map_or(every, |until| {
        // Just past the expiry: a lease holds up to and including its end.
        let left = u64::try_from(until.saturating_sub(now_us)).unwrap_or(0);
        every.min(Duration::from_micros(left) + Duration::from_millis(1))
    })
}

/// Ends here every session of a lost peer, its pauses resolved first, and
/// takes the peer out of the directory, recording each session's end in its
/// history (once in the cluster, after what its replica recorded). A peer
/// that `retired` (shut down cleanly) recorded its own ends; what this
/// replica still shows of it (its relay broke before the ends came) ends
/// as it did, shut down.
async fn lost(cluster: &Cluster, peer: &Peer, now: i64, retired: bool) {
    let (reason, by, detail) = if retired {
        (
            EndReason::DaemonShutdown,
            SHUTDOWN_BY,
            format!("replica {} at {} shut down", peer.id, peer.address),
        )
    } else {
        (
            EndReason::ReplicaLost,
            LOST_BY,
            format!(
                "replica {} at {} stopped renewing its lease and does not answer",
                peer.id, peer.address
            ),
        )
    };
    let sessions = cluster.owners.sessions_of(&peer.id);
    tracing::info!(replica = %peer.id, address = %peer.address, retired, "a replica whose lease ran out does not answer: it is gone");
    let ended = SessionEnded {
        reason: reason.into(),
        detail,
        ..Default::default()
    };
    let resolved = |key: String, thread_id: i64| PauseResolved {
        key,
        command: CommandKind::Unspecified.into(),
        by: by.into(),
        thread_id,
        decision: None,
        client_name: String::new(),
    };
    // What each session's history is missing: its replica's last word.
    // Nothing changes here until the directory agrees the peer is gone: a
    // peer that renewed meanwhile (slow to answer, say, after an outage)
    // keeps its sessions.
    let mut last: HashMap<String, Vec<Payload>> = HashMap::new();
    let mut shown_here = Vec::new();
    for session in &sessions {
        let (live, shown) = cluster.bus.with_view(|v| {
            (
                v.session(session)
                    .is_some_and(|s| s.state != SessionState::Ended as i32),
                v.pauses(Some(session)),
            )
        });
        let held = cluster.owners.held_of(session);
        let mut payloads: Vec<Payload> = held
            .into_iter()
            .map(|(key, thread)| Payload::PauseResolved(resolved(key, thread)))
            .collect();
        payloads.push(Payload::SessionEnded(ended.clone()));
        last.insert(session.clone(), payloads);
        if live {
            shown_here.push((session.clone(), shown));
        }
    }
    // Sessions the directory gives the peer that this replica never saw
    // (it started after them) end in their history too.
    match cluster.store.owned_sessions().await {
        Ok(owned) => {
            for o in owned.into_iter().filter(|o| o.replica_id == peer.id) {
                last.entry(o.session_id)
                    .or_insert_with(|| vec![Payload::SessionEnded(ended.clone())]);
            }
        }
        Err(err) => tracing::warn!(error = %err, "could not read the session directory"),
    }
    let mut rows = Vec::new();
    for (session, payloads) in last {
        let Ok(after) = cluster.store.last_recorded_seq(&session).await else {
            // Tried again at the next look: the peer is still in the
            // directory, lapsed.
            return;
        };
        for (seq, payload) in (after + 1..).zip(payloads) {
            let event = Event {
                seq,
                session_id: session.clone(),
                time: Some(timestamp_from_us(now_us())),
                payload: Some(payload),
            };
            rows.extend(stepd_history::recorded(&event));
        }
    }
    if let Err(err) = cluster.store.claim_lost_replica(&peer.id, now, rows).await {
        tracing::warn!(error = %err, replica = %peer.id, "could not take a lost replica out of the directory");
        return;
    }
    match cluster.store.replicas().await {
        Ok(replicas) if replicas.iter().all(|r| r.id != peer.id) => {}
        Ok(_) => {
            tracing::info!(replica = %peer.id, "a replica taken for lost renewed its lease: it keeps its sessions");
            return;
        }
        Err(err) => {
            tracing::warn!(error = %err, replica = %peer.id, "could not read the directory after taking a replica out");
            return;
        }
    }
    // Marked lost before the ends are shown: a client that reads an end
    // and asks about the session at once is answered here, not sent to
    // the dead replica.
    for session in &sessions {
        cluster.owners.lose(session);
    }
    for (session, shown) in shown_here {
        tracing::warn!(replica = %peer.id, session = %session, "a lost replica's session ends");
        for pause in shown {
            let payload = Payload::PauseResolved(resolved(pause.key, pause.thread_id));
            cluster.bus.publish_theirs(&session, payload);
        }
        cluster
            .bus
            .publish_theirs(&session, Payload::SessionEnded(ended.clone()));
    }
    cluster.peers.forget(peer);
}

/// Records in the directory each session this replica starts, and forgets
/// it when it ends.
pub(super) async fn record_own_sessions(cluster: Arc<Cluster>) {
    let filter = Filter::from_watch(&Watch {
        channels: vec![EventChannel::Lifecycle as i32],
        ..Default::default()
    });
    let (_, mut events) = cluster.bus.subscribe(&filter, None, "");
    let mut recorded: HashSet<String> = HashSet::new();
    loop {
        let event = tokio::select! {
            () = cluster.stop.cancelled() => return,
            event = events.recv() => event,
        };
        match event {
            Ok(event) => match &event.payload {
                Some(Payload::SessionStarted(_)) if cluster.runs(&event.session_id) => {
                    own(&cluster, &mut recorded, &event.session_id).await;
                }
                Some(Payload::SessionEnded(_)) if recorded.remove(&event.session_id) => {
                    disown(&cluster, &event.session_id).await;
                }
                _ => {}
            },
            Err(RecvError::Lagged(_)) => {
                // What was missed is read from the view instead.
                let live: HashSet<String> = cluster.bus.with_view(|v| {
                    v.sessions(false)
                        .into_iter()
                        .map(|s| s.id)
                        .filter(|id| cluster.runs(id))
                        .collect()
                });
                let new: Vec<String> = live.difference(&recorded).cloned().collect();
                let gone: Vec<String> = recorded.difference(&live).cloned().collect();
                for id in new {
                    own(&cluster, &mut recorded, &id).await;
                }
                for id in gone {
                    recorded.remove(&id);
                    disown(&cluster, &id).await;
                }
            }
            Err(RecvError::Closed) => return,
        }
    }
}

async fn own(cluster: &Cluster, recorded: &mut HashSet<String>, session_id: &str) {
    recorded.insert(session_id.to_owned());
    if let Err(err) = cluster
        .store
        .own_session(session_id, &cluster.id, now_us())
        .await
    {
        cluster.unsure.store(true, Ordering::Relaxed);
        tracing::warn!(error = %err, session = %session_id, "could not record the session in the directory");
    }
}

async fn disown(cluster: &Cluster, session_id: &str) {
    if let Err(err) = cluster.store.disown_session(session_id).await {
        cluster.unsure.store(true, Ordering::Relaxed);
        tracing::warn!(error = %err, session = %session_id, "could not take the ended session out of the directory");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_lease_running_out_first_is_looked_at_just_after_it_ends() {
        let every = Duration::from_secs(10);
        assert_eq!(next_look(every, None, 0), every);
        assert_eq!(
            next_look(every, Some(3_000_000), 1_000_000),
            Duration::from_millis(2001)
        );
        assert_eq!(next_look(every, Some(60_000_000), 0), every);
        // Already past (the directory was slow to read): look again at once.
        assert_eq!(next_look(every, Some(1), 5), Duration::from_millis(1));
    }
}
