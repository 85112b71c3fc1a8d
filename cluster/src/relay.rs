//! Follows one peer's own sessions over its `Subscribe` and publishes their
//! events on this replica's bus, so every stream, list and snapshot here
//! covers them. The first answer is a snapshot, reconciled with what this
//! replica believed of the peer's sessions; after a broken stream the relay
//! resumes from its cursor on the peer, exactly (replay) or through the
//! peer's snapshot (gap).

use std::{collections::HashSet, sync::Arc, time::Duration};

use stepd_proto::v1::{
    EndReason, Event, PauseResolved, SessionEnded, SessionStarted, SessionState, Snapshot, Stopped,
    SubscribeRequest, Watch, event::Payload, event_service_client::EventServiceClient,
    subscribe_request::Message,
};
use tokio::sync::mpsc;
use tokio_stream::{StreamExt, wrappers::ReceiverStream};
use tokio_util::sync::CancellationToken;

use super::{Cluster, Peer, RELAY};

/// The longest wait between attempts to reach a peer.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

pub(super) async fn follow(cluster: Arc<Cluster>, peer: Peer, stop: CancellationToken) {
    let mut cursor = 0u64;
    let mut backoff = Duration::from_millis(50);
    loop {
        let outcome = tokio::select! {
            () = stop.cancelled() => return,
            outcome = stream(&cluster, &peer, &mut cursor) => outcome,
        };
        match outcome {
            Ok(Ended::Closed) => backoff = Duration::from_millis(50),
            Ok(Ended::Replaced(other)) => {
                // The peer is gone for good (an instance id is never used
                // twice): whatever it still shows here ends when the lease
                // loop finds it gone, not through another replica's stream.
                tracing::info!(replica = %peer.id, address = %peer.address, answering = %other, "a peer's address answers as another replica; no longer following it");
                return;
            }
            Err(err) => {
                tracing::debug!(replica = %peer.id, error = %err, "following a peer's events broke off");
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// How a stream from the peer ended, when it did not break.
enum Ended {
    /// The peer ended it (it shuts down, or its stream was closed).
    Closed,
    /// The peer's address answered as another replica, this one: a replica
    /// started there after the peer stopped.
    Replaced(String),
}

/// One stream from the peer, until it ends or breaks.
async fn stream(cluster: &Cluster, peer: &Peer, cursor: &mut u64) -> anyhow::Result<Ended> {
    let channel = cluster.peers.channel(peer)?;
    let (requests, inbound) = mpsc::channel(1);
    requests
        .send(SubscribeRequest {
            message: Some(Message::Watch(Watch {
                resume_after_seq: *cursor,
                resume_instance_id: peer.id.clone(),
                client_name: format!("stepd replica {}", cluster.id),
                ..Default::default()
            })),
        })
        .await?;
    let mut request = tonic::Request::new(ReceiverStream::new(inbound));
    *request.metadata_mut() =
        tonic::metadata::MetadataMap::from_headers(cluster.peers.headers(None));
    request
        .metadata_mut()
        .insert(RELAY, tonic::metadata::MetadataValue::from_static("1"));
    let mut events = EventServiceClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .subscribe(request)
        .await?
        .into_inner();
    let mut parts: Vec<Snapshot> = Vec::new();
    // `requests` stays open: the peer ends a stream whose client hung up.
    let _requests = requests;
    while let Some(response) = events.next().await {
        let Some(event) = response?.event else {
            continue;
        };
        match &event.payload {
            // A stream that does not resume the peer's own numbering starts
            // with a snapshot naming who answers: after a restart on the
            // peer's address, that is another replica, whose sessions are
            // not the peer's to show (nor to end when the peer is found gone).
            Some(Payload::Snapshot(part)) if part.instance_id != peer.id => {
                return Ok(Ended::Replaced(part.instance_id.clone()));
            }
            Some(Payload::Snapshot(part)) => {
                parts.push(part.clone());
                if !part.more {
                    *cursor = part.seq;
                    reconcile(cluster, peer, std::mem::take(&mut parts));
                }
            }
            Some(Payload::Gap(_) | Payload::Heartbeat(_) | Payload::Error(_)) | None => {}
            Some(_) => {
                *cursor = event.seq;
                relay(cluster, peer, event);
            }
        }
    }
    Ok(Ended::Closed)
}

/// Publishes one of the peer's events here.
fn relay(cluster: &Cluster, peer: &Peer, event: Event) {
    if event.session_id.is_empty() {
        return;
    }
    if let Some(Payload::SessionStarted(started)) = &event.payload
        && let Some(previous) = started.session.as_ref().map(|s| &s.previous_session_id)
        && !previous.is_empty()
        && cluster.owners.is_relayed(previous)
        && cluster
            .owners
            .of_session(previous)
            .is_none_or(|p| p.id != peer.id)
    {
        // The probe left another replica for this one: its holds there are
        // the ones it re-reports here.
        stepd_probe::supersede(&cluster.bus, previous);
    }
    // Noted first and kept after the end: whatever reads the event later
    // (the history's recorder) must still find it is the peer's.
    cluster.owners.note(peer, &event);
    let Some(payload) = event.payload else {
        return;
    };
    // What this replica resolved or ended already (the probe moved on, or
    // the peer was taken for lost) is not resolved or ended twice.
    // Only these two are looked up, and by key: the view is not read for
    // every relayed event.
    let settled = match &payload {
        Payload::PauseResolved(r) => !cluster.bus.with_view(|v| v.has_pause(&r.key)),
        Payload::SessionEnded(_) => cluster.bus.with_view(|v| {
            v.session(&event.session_id)
                .is_some_and(|s| s.state == SessionState::Ended as i32)
        }),
        _ => false,
    };
    if !settled {
        cluster.bus.publish_theirs(&event.session_id, payload);
    }
}

/// Brings what this replica shows of the peer's sessions to the peer's
/// snapshot: new sessions and pauses are announced, and sessions and pauses
/// the peer no longer has end or resolve here.
fn reconcile(cluster: &Cluster, peer: &Peer, parts: Vec<Snapshot>) {
    let sessions: Vec<_> = parts.iter().flat_map(|p| p.sessions.iter()).collect();
    let pauses: Vec<_> = parts.iter().flat_map(|p| p.pauses.iter()).collect();
    let live: HashSet<&str> = sessions
        .iter()
        .filter(|s| s.state != SessionState::Ended as i32)
        .map(|s| s.id.as_str())
        .collect();
    let (known, known_pauses) = cluster.bus.with_view(|v| {
        let known: HashSet<String> = v
            .sessions(false)
            .into_iter()
            .map(|s| s.id)
            .filter(|id| {
                cluster
                    .owners
                    .of_session(id)
                    .is_some_and(|p| p.id == peer.id)
            })
            .collect();
        let pauses: Vec<_> = v
            .pauses(None)
            .into_iter()
            .filter(|p| known.contains(&p.session_id))
            .collect();
        (known, pauses)
    });
    for session in &sessions {
        if live.contains(session.id.as_str()) && !known.contains(&session.id) {
            let started = Event {
                session_id: session.id.clone(),
                payload: Some(Payload::SessionStarted(Box::new(SessionStarted {
                    session: Some((*session).clone()),
                }))),
                ..Default::default()
            };
            relay(cluster, peer, started);
        }
    }
    let held: HashSet<&str> = pauses.iter().map(|p| p.key.as_str()).collect();
    for pause in known_pauses {
        if !held.contains(pause.key.as_str()) && live.contains(pause.session_id.as_str()) {
            let resolved = Event {
                session_id: pause.session_id.clone(),
                payload: Some(Payload::PauseResolved(PauseResolved {
                    key: pause.key.clone(),
                    thread_id: pause.thread_id,
                    ..Default::default()
                })),
                ..Default::default()
            };
            relay(cluster, peer, resolved);
        }
    }
    let shown: HashSet<String> = cluster
        .bus
        .with_view(|v| v.pauses(None).into_iter().map(|p| p.key).collect());
    for pause in pauses {
        if !shown.contains(&pause.key) {
            let stopped = Event {
                session_id: pause.session_id.clone(),
                payload: Some(Payload::Stopped(Box::new(Stopped {
                    pause: Some(pause.clone()),
                    all_threads_stopped: false,
                }))),
                ..Default::default()
            };
            relay(cluster, peer, stopped);
        }
    }
    for id in known {
        if !live.contains(id.as_str()) {
            let ended = Event {
                session_id: id,
                payload: Some(Payload::SessionEnded(SessionEnded {
                    reason: EndReason::Unspecified.into(),
                    detail: format!(
                        "ended on replica {} while this replica was not following it",
                        peer.id
                    ),
                    ..Default::default()
                })),
                ..Default::default()
            };
            relay(cluster, peer, ended);
        }
    }
}
