//! `stepctl history SESSION`: a session's recorded events, oldest first.

use clap::Args;
use stepd_proto::v1::{GetSessionHistoryRequest, history_service_client::HistoryServiceClient};

use crate::{
    connect::{Channel, client},
    exit::Failure,
    render::{self, events, json},
};

/// Arguments of `history`.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The session (ended or live).
    pub session: String,
    /// Only these channels (repeatable): lifecycle, execution, output, breakpoints, probe, inspector, notifications.
    #[arg(long = "channel")]
    pub channels: Vec<String>,
}

/// Prints every recorded event of the session, page by page; with `--json`
/// one event per line, as `watch --json` prints them, after a
/// `{"dropped": …}` line when retention dropped the oldest.
pub async fn run(channel: Channel, args: HistoryArgs, as_json: bool) -> Result<(), Failure> {
    let channels = args
        .channels
        .iter()
        .map(|c| super::watch::channel_of(c))
        .collect::<Result<Vec<_>, _>>()?;
    let mut history = client!(HistoryServiceClient, channel);
    let mut page_token = String::new();
    let mut first = true;
    loop {
        let page = history
            .get_session_history(GetSessionHistoryRequest {
                session_id: args.session.clone(),
                channels: channels.clone(),
                page_size: 1000,
                page_token,
            })
            .await?
            .into_inner();
        // What retention dropped is said first, in JSON too, so a script
        // knows the events that follow are not the whole history.
        if first && let Some(dropped) = &page.dropped {
            if as_json {
                println!("{{\"dropped\":{}}}", json(dropped));
            } else {
                println!(
                    "({} earlier events dropped {}: {})",
                    dropped.events,
                    render::timestamp(dropped.at.as_ref()),
                    dropped.reason
                );
            }
        }
        first = false;
        for event in &page.events {
            if as_json {
                println!("{}", json(event));
            } else {
                println!("{}", events::history_text(event));
            }
        }
        if page.next_page_token.is_empty() {
            return Ok(());
        }
        page_token = page.next_page_token;
    }
}
