//! `stepctl sessions --ended`: the sessions that ended, every replica's,
//! from the daemon's store, newest first.

use std::time::{Duration, SystemTime};

use prost_types::Timestamp;
use stepd_proto::v1::{ListEndedSessionsRequest, history_service_client::HistoryServiceClient};

use crate::{
    connect::{Channel, client},
    exit::Failure,
    render::{
        self, print_json,
        sessions::{dash, labels_text, state_text},
    },
};

/// What `sessions --ended` asks for: its flags as given.
pub struct Query {
    /// `--labels`: a label selector.
    pub labels: Option<String>,
    /// `--since`: RFC 3339, or a duration back from now.
    pub since: Option<String>,
    /// `--until`: RFC 3339, or a duration back from now.
    pub until: Option<String>,
    /// `--limit`: one page of at most this many sessions.
    pub limit: Option<u32>,
    /// `--page-token`: the page to go on from.
    pub page_token: Option<String>,
}

/// A time as `--since`/`--until` take it: RFC 3339, or a duration back
/// from now (`90m`, `2h`, `7d`).
fn when(flag: &str, text: &str) -> Result<Timestamp, Failure> {
    let at = humantime::parse_rfc3339_weak(text)
        .or_else(|_| {
            humantime::parse_duration(text).map(|ago| {
                SystemTime::now()
                    .checked_sub(ago)
                    .unwrap_or(SystemTime::UNIX_EPOCH)
            })
        })
        .map_err(|_| {
            Failure::Usage(format!(
                "{flag} {text}: give a time (2025-01-31T12:00:00Z) or a duration back from now (90m, 2h)"
            ))
        })?;
    let since_epoch = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    Ok(Timestamp {
        seconds: i64::try_from(since_epoch.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(since_epoch.subsec_nanos()).unwrap_or(0),
    })
}

/// Lists ended sessions: every page, or with `--limit` one page and the
/// token of the next.
pub async fn list(channel: Channel, args: Query, json: bool) -> Result<(), Failure> {
    let mut request = ListEndedSessionsRequest {
        label_selector: args.labels.unwrap_or_default(),
        since: args
            .since
            .as_deref()
            .map(|t| when("--since", t))
            .transpose()?,
        until: args
            .until
            .as_deref()
            .map(|t| when("--until", t))
            .transpose()?,
        page_size: args.limit.unwrap_or(1000),
        page_token: args.page_token.unwrap_or_default(),
    };
    let mut history = client!(HistoryServiceClient, channel);
    let mut r = stepd_proto::v1::ListEndedSessionsResponse::default();
    loop {
        let page = history
            .list_ended_sessions(request.clone())
            .await?
            .into_inner();
        r.sessions.extend(page.sessions);
        r.next_page_token = page.next_page_token;
        if args.limit.is_some() || r.next_page_token.is_empty() {
            break;
        }
        request.page_token.clone_from(&r.next_page_token);
    }
    if json {
        print_json(&r);
        return Ok(());
    }
    if r.sessions.is_empty() {
        println!("no ended sessions");
    } else {
        let rows: Vec<Vec<String>> = r
            .sessions
            .iter()
            .map(|s| {
                vec![
                    s.id.clone(),
                    dash(&s.name),
                    dash(&s.adapter),
                    state_text(s),
                    render::timestamp(s.started_at.as_ref()),
                    render::timestamp(s.ended_at.as_ref()),
                    dash(&s.replica_id),
                    labels_text(&s.labels),
                ]
            })
            .collect();
        println!(
            "{}",
            render::table(
                &[
                    "ID", "NAME", "ADAPTER", "STATE", "STARTED", "ENDED", "REPLICA", "LABELS"
                ],
                &rows
            )
        );
    }
    if !r.next_page_token.is_empty() {
        println!("more: --page-token {}", r.next_page_token);
    }
    Ok(())
}
