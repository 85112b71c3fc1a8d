//! `threads`, `stack`, `scopes`, `vars`, `set`, `eval`, `output`: looking
//! into a session (the inspection RPCs of `SessionService`).

use crate::connect::client;
use std::io::Write;

use clap::{Args, ValueEnum};
use stepd_proto::v1::{
    EvaluateContext, EvaluateRequest, Event, EventChannel, GetSessionRequest, GetStackTraceRequest,
    ListPausesRequest, ListScopesRequest, ListThreadsRequest, ListVariablesRequest, Output,
    OutputChunk, ReadOutputRequest, ReadOutputResponse, SessionState, SetVariableRequest,
    SubscribeRequest, VariableFilter, Watch, event::Payload,
    event_service_client::EventServiceClient, session_service_client::SessionServiceClient,
    subscribe_request::Message,
};
use tokio::sync::mpsc;
use tokio_stream::{StreamExt, wrappers::ReceiverStream};
use tonic::{Code, Status};

use crate::connect::Channel;
use tonic_types::{ErrorDetails, StatusExt};

use crate::{
    cmd::sessions::CLIENT_NAME,
    exit::Failure,
    render::{
        self, json,
        pauses::where_text,
        print_json,
        sessions::{dash, yes_no},
    },
};

/// Arguments of `threads`.
#[derive(Debug, Args)]
pub struct ThreadsArgs {
    /// The session.
    pub session: String,
}

/// Arguments of `stack`.
#[derive(Debug, Args)]
pub struct StackArgs {
    /// The session.
    pub session: String,
    /// A stopped thread (default: the thread of the session's latest pause).
    #[arg(long, value_name = "N")]
    pub thread: Option<i64>,
    /// Index of the first frame (0 = top).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub start: u32,
    /// Number of frames (default: all).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub levels: u32,
}

/// Arguments of `scopes`.
#[derive(Debug, Args)]
pub struct ScopesArgs {
    /// The session.
    pub session: String,
    /// Frame handle from `stepctl stack`.
    pub frame_id: String,
}

/// Arguments of `vars`.
#[derive(Debug, Args)]
pub struct VarsArgs {
    /// The session.
    pub session: String,
    /// Container handle from `stepctl scopes` or an earlier `vars`.
    pub variables_ref: String,
    /// First child to list.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub start: u32,
    /// Number of children (default: all).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub count: u32,
    /// Only indexed children (elements).
    #[arg(long, conflicts_with = "named")]
    pub indexed: bool,
    /// Only named children (fields, attributes).
    #[arg(long)]
    pub named: bool,
}

/// Arguments of `set`.
#[derive(Debug, Args)]
pub struct SetArgs {
    /// The session.
    pub session: String,
    /// Container handle holding the variable.
    pub variables_ref: String,
    /// The variable's name in that container.
    pub name: String,
    /// New value, as an expression in the debuggee's language.
    #[arg(allow_hyphen_values = true)]
    pub value: String,
}

/// Evaluation contexts, as DAP defines them.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ContextArg {
    /// A debug console: side effects allowed.
    Repl,
    /// A watch expression.
    Watch,
    /// Hovering over source.
    Hover,
    /// Copying a value.
    Clipboard,
}

/// Arguments of `eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The session.
    pub session: String,
    /// Expression in the debuggee's language.
    #[arg(allow_hyphen_values = true)]
    pub expression: String,
    /// Frame handle (default: the top frame of the latest stop, or the global
    /// context while the program runs).
    #[arg(long, value_name = "FRAME_ID")]
    pub frame: Option<String>,
    /// Evaluation context (default: the adapter's value context).
    #[arg(long, value_enum)]
    pub context: Option<ContextArg>,
}

/// Arguments of `output`.
#[derive(Debug, Args)]
pub struct OutputArgs {
    /// The session.
    pub session: String,
    /// Start at this byte offset of the session's output.
    #[arg(long, value_name = "OFFSET", default_value_t = 0)]
    pub after: u64,
    /// Keep printing output as it comes, until the session ends.
    #[arg(long)]
    pub follow: bool,
}

fn client(channel: Channel) -> SessionServiceClient<Channel> {
    client!(SessionServiceClient, channel)
}

/// `stepctl threads`.
pub async fn threads(channel: Channel, args: ThreadsArgs, json: bool) -> Result<(), Failure> {
    let r = client(channel)
        .list_threads(ListThreadsRequest {
            session_id: args.session,
        })
        .await?
        .into_inner();
    if json {
        print_json(&r);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = r
        .threads
        .iter()
        .map(|t| {
            vec![
                t.id.to_string(),
                dash(&t.name),
                yes_no(t.stopped).into(),
                dash(&t.pause_key),
            ]
        })
        .collect();
    println!(
        "{}",
        render::table(&["ID", "NAME", "STOPPED", "PAUSE"], &rows)
    );
    Ok(())
}

/// The thread of the session's latest pause; NOT_STOPPED when it has none.
async fn latest_paused_thread(channel: Channel, session: &str) -> Result<i64, Failure> {
    let pauses = client(channel)
        .list_pauses(ListPausesRequest {
            session_id: session.to_owned(),
        })
        .await?
        .into_inner()
        .pauses;
    let latest = pauses
        .iter()
        .filter(|p| p.thread_id != 0)
        .max_by_key(|p| p.created_at.map(|t| (t.seconds, t.nanos)));
    match latest {
        Some(pause) => Ok(pause.thread_id),
        None => Err(Failure::Status(Status::with_error_details(
            Code::FailedPrecondition,
            format!("session {session} has no stopped thread; give --thread"),
            ErrorDetails::with_error_info(
                "NOT_STOPPED",
                stepd_proto::ERROR_DOMAIN,
                [("session_id".to_owned(), session.to_owned())],
            ),
        ))),
    }
}

/// `stepctl stack`.
pub async fn stack(channel: Channel, args: StackArgs, json: bool) -> Result<(), Failure> {
    let thread_id = match args.thread {
        Some(thread) => thread,
        None => latest_paused_thread(channel.clone(), &args.session).await?,
    };
    let r = client(channel)
        .get_stack_trace(GetStackTraceRequest {
            session_id: args.session,
            thread_id,
            start_frame: args.start,
            levels: args.levels,
        })
        .await?
        .into_inner();
    if json {
        print_json(&r);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = r
        .frames
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let place = f
                .location
                .as_ref()
                .map(|l| {
                    where_text(&stepd_proto::v1::Location {
                        function: String::new(),
                        ..l.clone()
                    })
                })
                .unwrap_or_else(|| "-".into());
            vec![
                (args.start as usize + i).to_string(),
                f.id.clone(),
                dash(&f.name),
                place,
            ]
        })
        .collect();
    println!(
        "thread {thread_id}: {} of {} frames",
        r.frames.len(),
        r.total_frames.max(r.frames.len() as u32)
    );
    println!(
        "{}",
        render::table(&["#", "FRAME", "FUNCTION", "WHERE"], &rows)
    );
    Ok(())
}

/// `stepctl scopes`.
pub async fn scopes(channel: Channel, args: ScopesArgs, json: bool) -> Result<(), Failure> {
    let r = client(channel)
        .list_scopes(ListScopesRequest {
            session_id: args.session,
            frame_id: args.frame_id,
        })
        .await?
        .into_inner();
    if json {
        print_json(&r);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = r
        .scopes
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                dash(&s.variables_ref),
                s.named_variables.to_string(),
                s.indexed_variables.to_string(),
                yes_no(s.expensive).into(),
            ]
        })
        .collect();
    println!(
        "{}",
        render::table(&["SCOPE", "REF", "NAMED", "INDEXED", "EXPENSIVE"], &rows)
    );
    Ok(())
}

/// `stepctl vars`.
pub async fn vars(channel: Channel, args: VarsArgs, json: bool) -> Result<(), Failure> {
    let filter = if args.indexed {
        VariableFilter::Indexed
    } else if args.named {
        VariableFilter::Named
    } else {
        VariableFilter::Unspecified
    };
    let r = client(channel)
        .list_variables(ListVariablesRequest {
            session_id: args.session,
            variables_ref: args.variables_ref,
            filter: filter.into(),
            start: args.start,
            count: args.count,
        })
        .await?
        .into_inner();
    if json {
        print_json(&r);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = r
        .variables
        .iter()
        .map(|v| {
            vec![
                v.name.clone(),
                dash(&v.r#type),
                v.value.clone(),
                dash(&v.variables_ref),
            ]
        })
        .collect();
    println!(
        "{}",
        render::table(&["NAME", "TYPE", "VALUE", "REF"], &rows)
    );
    Ok(())
}

/// `stepctl set`.
pub async fn set(channel: Channel, args: SetArgs, json: bool) -> Result<(), Failure> {
    let variable = client(channel)
        .set_variable(SetVariableRequest {
            session_id: args.session,
            variables_ref: args.variables_ref,
            name: args.name,
            value: args.value,
        })
        .await?
        .into_inner()
        .variable
        .unwrap_or_default();
    if json {
        print_json(&variable);
    } else {
        println!("{} = {}", variable.name, variable.value);
    }
    Ok(())
}

/// `stepctl eval`.
pub async fn eval(channel: Channel, args: EvalArgs, json: bool) -> Result<(), Failure> {
    let context = match args.context {
        None => EvaluateContext::Unspecified,
        Some(ContextArg::Repl) => EvaluateContext::Repl,
        Some(ContextArg::Watch) => EvaluateContext::Watch,
        Some(ContextArg::Hover) => EvaluateContext::Hover,
        Some(ContextArg::Clipboard) => EvaluateContext::Clipboard,
    };
    let session = args.session.clone();
    let result = client(channel)
        .evaluate(EvaluateRequest {
            session_id: args.session,
            expression: args.expression,
            frame_id: args.frame.unwrap_or_default(),
            context: context.into(),
        })
        .await?
        .into_inner()
        .result
        .unwrap_or_default();
    if json {
        print_json(&result);
        return Ok(());
    }
    println!("{}", result.value);
    if !result.variables_ref.is_empty() {
        let kind = if result.r#type.is_empty() {
            String::new()
        } else {
            format!("{} ", result.r#type)
        };
        println!(
            "({kind}with children: stepctl vars {session} {})",
            result.variables_ref
        );
    }
    Ok(())
}

/// Reads the session's output from `from` to the current end, page by page.
async fn read_all(
    client: &mut SessionServiceClient<Channel>,
    session: &str,
    from: u64,
) -> Result<ReadOutputResponse, Failure> {
    let mut all = ReadOutputResponse {
        next_offset: from,
        ..Default::default()
    };
    loop {
        let page = client
            .read_output(ReadOutputRequest {
                session_id: session.to_owned(),
                after_offset: all.next_offset,
                ..Default::default()
            })
            .await?
            .into_inner();
        all.truncated |= page.truncated && all.chunks.is_empty();
        all.dropped_bytes = page.dropped_bytes;
        let progressed = page.next_offset > all.next_offset;
        all.next_offset = all.next_offset.max(page.next_offset);
        let empty = page.chunks.is_empty();
        all.chunks.extend(page.chunks);
        if empty || !progressed {
            return Ok(all);
        }
    }
}

/// The part of a chunk at or after `offset` (None when it is all before).
fn after(chunk: OutputChunk, offset: u64) -> Option<OutputChunk> {
    let end = chunk.offset + chunk.text.len() as u64;
    if end <= offset {
        return None;
    }
    if chunk.offset >= offset {
        return Some(chunk);
    }
    let skip = (offset - chunk.offset) as usize;
    let text = chunk.text.get(skip..).map(str::to_owned)?;
    Some(OutputChunk {
        offset,
        text,
        ..chunk
    })
}

/// Prints one output chunk: raw text, or an `output` event as a JSON line.
fn emit(session: &str, chunk: OutputChunk, as_json: bool) {
    if as_json {
        let event = Event {
            seq: 0,
            session_id: session.to_owned(),
            time: chunk.time,
            payload: Some(Payload::Output(Output { chunk: Some(chunk) })),
        };
        println!("{}", json(&event));
    } else {
        print!("{}", chunk.text);
        let _ = std::io::stdout().flush();
    }
}

/// `stepctl output`.
pub async fn output(channel: Channel, args: OutputArgs, as_json: bool) -> Result<(), Failure> {
    if args.follow {
        return follow(channel, args, as_json).await;
    }
    let r = read_all(&mut client(channel), &args.session, args.after).await?;
    if as_json {
        print_json(&r);
    } else {
        if r.truncated {
            eprintln!(
                "stepctl: {} bytes of earlier output were dropped from the daemon's buffer",
                r.dropped_bytes
            );
        }
        let text: String = r.chunks.iter().map(|c| c.text.as_str()).collect();
        print!("{text}");
        let _ = std::io::stdout().flush();
    }
    Ok(())
}

/// `output --follow`: subscribe first (output + lifecycle of this session),
/// then catch up with ReadOutput from the snapshot on, then print `output`
/// events until `session_ended`. Offsets make the two sources line up
/// without gaps or repeats; after a `gap` the next snapshot triggers another
/// catch-up read.
async fn follow(channel: Channel, args: OutputArgs, as_json: bool) -> Result<(), Failure> {
    let session = args.session.clone();
    let (tx, rx) = mpsc::channel(4);
    tx.send(SubscribeRequest {
        message: Some(Message::Watch(Watch {
            session_ids: vec![session.clone()],
            channels: vec![EventChannel::Output as i32, EventChannel::Lifecycle as i32],
            client_name: format!("{CLIENT_NAME} output"),
            ..Default::default()
        })),
    })
    .await
    .map_err(|_| Failure::Other(anyhow::anyhow!("subscription closed before it started")))?;
    let mut reader = client(channel.clone());
    let mut events = client!(EventServiceClient, channel)
        .subscribe(ReceiverStream::new(rx))
        .await?
        .into_inner();
    let mut printed = args.after;
    loop {
        let next = tokio::select! {
            next = events.next() => next,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let Some(response) = next else {
            return Ok(()); // the daemon shut down
        };
        let Some(event) = response?.event else {
            continue;
        };
        if event.session_id != session && !matches!(event.payload, Some(Payload::Snapshot(_))) {
            continue;
        }
        match event.payload {
            Some(Payload::Snapshot(_)) => {
                // Whether it has ended, asked before the catch-up read so that
                // read holds everything an ended session printed.
                let ended = reader
                    .get_session(GetSessionRequest {
                        session_id: session.clone(),
                    })
                    .await?
                    .into_inner()
                    .session
                    .is_some_and(|s| s.state == SessionState::Ended as i32);
                let caught_up = read_all(&mut reader, &session, printed).await?;
                if caught_up.truncated && printed > 0 && !as_json {
                    eprintln!("stepctl: some output was dropped from the daemon's buffer");
                }
                for chunk in caught_up.chunks {
                    if let Some(chunk) = after(chunk, printed) {
                        printed = chunk.offset + chunk.text.len() as u64;
                        emit(&session, chunk, as_json);
                    }
                }
                printed = printed.max(caught_up.next_offset);
                if ended {
                    drop(tx);
                    return Ok(());
                }
            }
            Some(Payload::Output(out)) => {
                if let Some(chunk) = out.chunk.and_then(|c| after(c, printed)) {
                    printed = chunk.offset + chunk.text.len() as u64;
                    emit(&session, chunk, as_json);
                }
            }
            Some(Payload::SessionEnded(end)) => {
                if as_json {
                    println!(
                        "{}",
                        json(&Event {
                            payload: Some(Payload::SessionEnded(end)),
                            ..event
                        })
                    );
                } else {
                    let code = end
                        .exit_code
                        .map(|c| format!(", exit code {c}"))
                        .unwrap_or_default();
                    let reason = render::enum_name(end.reason().as_str_name(), "END_REASON_")
                        .replace('_', " ");
                    eprintln!("stepctl: session ended: {reason}{code}");
                }
                drop(tx);
                return Ok(());
            }
            Some(Payload::Gap(_)) | Some(Payload::Heartbeat(_)) => {}
            Some(Payload::Error(e)) => {
                return Err(Failure::Other(anyhow::anyhow!(
                    "subscription error: {}",
                    e.message
                )));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(offset: u64, text: &str) -> OutputChunk {
        OutputChunk {
            offset,
            text: text.into(),
            ..Default::default()
        }
    }

    #[test]
    fn chunks_are_cut_at_the_printed_offset() {
        assert!(after(chunk(0, "abc"), 3).is_none());
        assert_eq!(after(chunk(3, "def"), 3).unwrap().text, "def");
        let cut = after(chunk(0, "abcdef"), 4).unwrap();
        assert_eq!((cut.offset, cut.text.as_str()), (4, "ef"));
    }
}
