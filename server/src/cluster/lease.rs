//! The lease: this replica renews its row in the directory a few times a
//! lease, drops the rows of replicas that stopped renewing, follows every
//! live peer's events, and ends a lost peer's sessions here. It also keeps
//! the directory's record of which sessions this replica runs.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use stepd_proto::v1::{EndReason, EventChannel, SessionEnded, SessionState, Watch, event::Payload};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::{Cluster, Peer, relay};
use crate::{events::Filter, time::now_us};

/// Renewals per lease: one may fail and the lease still holds.
const RENEWALS_PER_LEASE: u32 = 3;

pub(super) async fn keep(cluster: Arc<Cluster>) {
    let every = (cluster.lease / RENEWALS_PER_LEASE).max(Duration::from_millis(50));
    let mut relays: HashMap<String, (Peer, CancellationToken)> = HashMap::new();
    loop {
        // When the first live peer's lease runs out, unless it renews first.
        let mut first_expiry_us = None;
        if let Err(err) = cluster.renew().await {
            tracing::warn!(error = %err, "could not renew this replica's lease");
        }
        let now = now_us();
        if let Err(err) = cluster.store.drop_expired_replicas(now).await {
            tracing::warn!(error = %err, "could not drop the replicas whose lease ran out");
        }
        // A directory that cannot be read says nothing about the peers:
        // they keep their sessions until it can.
        match cluster.store.replicas().await {
            Ok(replicas) => {
                let peers: Vec<_> = replicas
                    .into_iter()
                    .filter(|r| r.id != cluster.id && r.lease_until_us >= now)
                    .collect();
                first_expiry_us = peers.iter().map(|r| r.lease_until_us).min();
                let live: HashMap<String, Peer> = peers
                    .into_iter()
                    .map(|r| {
                        let peer = Peer {
                            id: r.id,
                            address: r.address,
                        };
                        (peer.id.clone(), peer)
                    })
                    .collect();
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
                let gone: Vec<String> = relays
                    .keys()
                    .filter(|id| !live.contains_key(*id))
                    .cloned()
                    .collect();
                for id in gone {
                    if let Some((peer, stop)) = relays.remove(&id) {
                        stop.cancel();
                        lost(&cluster, &peer);
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

/// Ends here every session of a peer that left the directory.
fn lost(cluster: &Cluster, peer: &Peer) {
    tracing::warn!(replica = %peer.id, address = %peer.address, "a replica left the cluster; its sessions end");
    for session in cluster.owners.sessions_of(&peer.id) {
        let live = cluster.bus.with_view(|v| {
            v.session(&session)
                .is_some_and(|s| s.state != SessionState::Ended as i32)
        });
        if live {
            cluster.bus.publish(
                &session,
                Payload::SessionEnded(SessionEnded {
                    reason: EndReason::ReplicaLost.into(),
                    detail: format!(
                        "replica {} at {} stopped renewing its lease",
                        peer.id, peer.address
                    ),
                    ..Default::default()
                }),
            );
        }
        cluster.owners.forget(&session);
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
        tracing::warn!(error = %err, session = %session_id, "could not record the session in the directory");
    }
}

async fn disown(cluster: &Cluster, session_id: &str) {
    if let Err(err) = cluster.store.disown_session(session_id).await {
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
