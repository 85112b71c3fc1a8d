//! `stepctl watch`: events as they come.

use crate::connect::Channel;
use crate::connect::client;
use clap::Args;
use std::collections::HashSet;

use stepd_proto::v1::{
    EventChannel, GetSessionRequest, SessionState, SubscribeRequest, Watch, event::Payload,
    event_service_client::EventServiceClient, session_service_client::SessionServiceClient,
    subscribe_request::Message,
};
use tokio::sync::mpsc;
use tokio_stream::{StreamExt, wrappers::ReceiverStream};

use crate::{
    exit::Failure,
    render::{events, json},
};

/// Arguments of `watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Only these sessions (repeatable); daemon-level events always come.
    /// The watch ends once all of them have ended (at once when they have).
    #[arg(long = "session")]
    pub sessions: Vec<String>,
    /// Only these channels (repeatable): lifecycle, execution, output, breakpoints, probe, inspector, notifications.
    #[arg(long = "channel")]
    pub channels: Vec<String>,
    /// Resume after this event seq instead of starting with a snapshot.
    #[arg(long)]
    pub resume_after: Option<u64>,
    /// With --resume-after: the instance id the seq came from.
    #[arg(long)]
    pub instance: Option<String>,
    /// Client name shown when this stream answers pauses.
    #[arg(long)]
    pub name: Option<String>,
    /// Exit after this many events (heartbeats not counted).
    #[arg(long)]
    pub count: Option<u64>,
    /// Print heartbeats too.
    #[arg(long)]
    pub heartbeats: bool,
}

pub fn channel_of(name: &str) -> Result<i32, Failure> {
    let full = format!("EVENT_CHANNEL_{}", name.to_ascii_uppercase());
    EventChannel::from_str_name(&full)
        .filter(|c| *c != EventChannel::Unspecified)
        .map(|c| c as i32)
        .ok_or_else(|| Failure::Usage(format!("unknown channel {name:?}")))
}

/// The sessions of `ids` that have not ended; each ended one is said.
async fn still_live(channel: Channel, ids: &[String]) -> Result<HashSet<String>, Failure> {
    let mut live = HashSet::new();
    for id in ids {
        let session = client!(SessionServiceClient, channel.clone())
            .get_session(GetSessionRequest {
                session_id: id.clone(),
            })
            .await?
            .into_inner()
            .session
            .unwrap_or_default();
        if session.state == SessionState::Ended as i32 {
            eprintln!(
                "session {id} has ended: {}",
                crate::render::sessions::end_text(
                    session.end_reason,
                    session.exit_code,
                    &session.signal
                )
            );
        } else {
            live.insert(id.clone());
        }
    }
    Ok(live)
}

/// Streams events until interrupted, `--count` is reached, the daemon stops,
/// or every session of `--session` has ended.
pub async fn run(channel: Channel, args: WatchArgs, as_json: bool) -> Result<(), Failure> {
    let channels = args
        .channels
        .iter()
        .map(|c| channel_of(c))
        .collect::<Result<Vec<_>, _>>()?;
    // Only for --session: the sessions whose end ends the watch.
    let mut live = still_live(channel.clone(), &args.sessions).await?;
    if !args.sessions.is_empty() && live.is_empty() {
        return Ok(());
    }
    let (tx, rx) = mpsc::channel(4);
    tx.send(SubscribeRequest {
        message: Some(Message::Watch(Watch {
            session_ids: args.sessions,
            channels,
            resume_after_seq: args.resume_after.unwrap_or(0),
            client_name: args.name.unwrap_or_else(|| "stepctl watch".into()),
            resume_instance_id: args.instance.unwrap_or_default(),
        })),
    })
    .await
    .map_err(|_| Failure::Other(anyhow::anyhow!("subscription closed before it started")))?;
    let mut events = client!(EventServiceClient, channel)
        .subscribe(ReceiverStream::new(rx))
        .await?
        .into_inner();
    let mut seen = 0u64;
    loop {
        let next = tokio::select! {
            next = events.next() => next,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let Some(response) = next else {
            return Ok(());
        };
        let Some(event) = response?.event else {
            continue;
        };
        let heartbeat = matches!(event.payload, Some(Payload::Heartbeat(_)));
        if heartbeat && !args.heartbeats {
            continue;
        }
        if as_json {
            println!("{}", json(&event));
        } else {
            println!("{}", events::watch_text(&event));
        }
        if !live.is_empty() {
            match &event.payload {
                Some(Payload::SessionEnded(_)) => {
                    live.remove(&event.session_id);
                }
                Some(Payload::Snapshot(snapshot)) => {
                    for session in &snapshot.sessions {
                        if session.state == SessionState::Ended as i32 {
                            live.remove(&session.id);
                        }
                    }
                }
                _ => {}
            }
            if live.is_empty() {
                return Ok(());
            }
        }
        if !heartbeat {
            seen += 1;
            if args.count.is_some_and(|n| seen >= n) {
                // Keep `tx` alive until here so the stream stays open while reading.
                drop(tx);
                return Ok(());
            }
        }
    }
}
