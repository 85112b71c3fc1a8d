//! `stepctl inspect`: the server-side inspector from a terminal. Opens a
//! value (an expression in the latest stop's frame, a pause's value or
//! locals, a variable handle, a session's exception, a tapped value), prints
//! its rendering, then reads navigation commands — from `--do` options, or
//! from stdin (interactively, with a prompt, when stdin is a terminal).
//! `--json` prints each answer in the protobuf JSON mapping, one per line.

use crate::connect::client;

use clap::{Args, ValueEnum};
use std::io::Write;
use stepd_proto::v1::{
    ClearRequest, FrameExpression, InspectRequest, InspectSource, InspectorConfig, NextPageRequest,
    NextSiblingRequest, PinValueRequest, PopRequest, PreviousPageRequest, PreviousSiblingRequest,
    PrintValueRequest, PushRequest, RefreshRequest, Rendering, ShowAnalyticsRequest,
    TapIndexedRequest, TapValueRequest, TogglePrettyPrintRequest, ToggleViewModeRequest, ViewMode,
    inspect_source::Source, inspector_service_client::InspectorServiceClient, render_item::Item,
};

use tonic::Status;

use crate::connect::Channel;

use crate::{
    exit::Failure,
    line_editor::{History, Input, Terminal, Vocabulary},
    render::{json, print_json},
};

/// View modes on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum View {
    /// The value's natural rendering.
    Normal,
    /// Sequences of records as rows and columns.
    Table,
    /// Raw fields or attributes.
    Object,
}

/// Arguments of `inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The session (for an expression, --ref or --exception).
    pub session: Option<String>,
    /// Expression to evaluate and inspect (in --frame, else the latest stop's top frame).
    pub expression: Option<String>,
    /// Frame handle for the expression.
    #[arg(long, value_name = "FRAME")]
    pub frame: Option<String>,
    /// Inspect the value of a pending pause.
    #[arg(long, value_name = "KEY", conflicts_with_all = ["locals", "var", "exception", "tap"])]
    pub pause: Option<String>,
    /// Inspect the locals of a pending pause.
    #[arg(long, value_name = "KEY", conflicts_with_all = ["var", "exception", "tap"])]
    pub locals: Option<String>,
    /// Inspect a variable handle (from `stepctl scopes` / `vars`).
    #[arg(long = "ref", value_name = "HANDLE", conflicts_with_all = ["exception", "tap"])]
    pub var: Option<String>,
    /// Inspect the session's current exception.
    #[arg(long, conflicts_with = "tap")]
    pub exception: bool,
    /// Inspect a tapped value by its `tap` event's seq.
    #[arg(long, value_name = "SEQ")]
    pub tap: Option<u64>,
    /// Children per page.
    #[arg(long, value_name = "N")]
    pub page_size: Option<u32>,
    /// Initial view mode.
    #[arg(long, value_enum)]
    pub view: Option<View>,
    /// A command to run (repeatable), e.g. --do "push 3" --do next; without
    /// --do, commands are read from stdin. `stepctl inspect … --do help` lists them.
    #[arg(long = "do", value_name = "COMMAND")]
    pub commands: Vec<String>,
    /// Keep the inspector open when done (print its id) instead of clearing it.
    #[arg(long)]
    pub keep: bool,
}

const HELP: &str = "\
commands:
  N | push N        descend into the child with index N
  u | up | pop      go back up
  n | next          next page            p | prev      previous page
  ] | sibling       next sibling         [ | back      previous sibling
  v | view          cycle NORMAL → TABLE → OBJECT
  pretty            toggle pretty printing
  page-size N       children per page (refresh)
  r | refresh       render again
  a | analytics [CUTOFF]
  print [CHUNK]     the whole value, streamed
  pin NAME          keep the value under NAME for later evaluations
  tap [N]           emit the value (or child N) as a tap event
  q | quit          clear the inspector and leave";

/// The source named by the arguments.
fn source(args: &InspectArgs) -> Result<(String, Source), Failure> {
    let session = args.session.clone().unwrap_or_default();
    if let Some(key) = &args.pause {
        return Ok((session, Source::PauseValue(key.clone())));
    }
    if let Some(key) = &args.locals {
        return Ok((session, Source::PauseLocals(key.clone())));
    }
    if let Some(seq) = args.tap {
        return Ok((session, Source::TapSeq(seq)));
    }
    let need_session = || {
        if session.is_empty() {
            Err(Failure::Usage("a session is required".into()))
        } else {
            Ok(())
        }
    };
    if let Some(handle) = &args.var {
        need_session()?;
        return Ok((session.clone(), Source::VariablesRef(handle.clone())));
    }
    if args.exception {
        need_session()?;
        return Ok((
            session.clone(),
            Source::LastExceptionSessionId(session.clone()),
        ));
    }
    need_session()?;
    let code = args.expression.clone().ok_or_else(|| {
        Failure::Usage(
            "what to inspect: an EXPRESSION, --pause KEY, --locals KEY, --ref HANDLE, --exception or --tap SEQ"
                .into(),
        )
    })?;
    Ok((
        session.clone(),
        Source::Expression(FrameExpression {
            session_id: session,
            frame_id: args.frame.clone().unwrap_or_default(),
            code,
        }),
    ))
}

/// A rendering as terminal text: value items show their index where the
/// text before them does not already.
pub fn rendering_text(r: &Rendering) -> String {
    let mut out = String::new();
    let page = r.page.unwrap_or_default();
    let pages = page
        .page_count
        .map_or_else(|| "?".to_owned(), |c| c.to_string());
    let view = ViewMode::try_from(r.view_mode)
        .unwrap_or(ViewMode::Normal)
        .as_str_name()
        .trim_start_matches("VIEW_MODE_")
        .to_owned();
    out.push_str(&format!(
        "── {} {} · page {}/{pages} · {view} · {}\n",
        if r.path.is_empty() { "(root)" } else { &r.path },
        if r.r#type.is_empty() {
            String::new()
        } else {
            format!("({})", r.r#type)
        },
        page.page + 1,
        r.inspector_id
    ));
    for item in &r.items {
        match &item.item {
            Some(Item::Text(t)) => out.push_str(t),
            Some(Item::Newline(_)) => out.push('\n'),
            Some(Item::Value(v)) => {
                out.push_str(&v.repr);
                let shown = format!("[{}]", v.idx);
                if !out.trim_end().ends_with(&shown) && v.repr != shown {
                    out.push_str(&format!("  #{}", v.idx));
                }
            }
            None => {}
        }
    }
    out
}

struct Session {
    client: InspectorServiceClient<Channel>,
    id: String,
    json: bool,
}

enum Step {
    Continue,
    Quit,
}

impl Session {
    fn show(&self, r: &Rendering) {
        if self.json {
            println!("{}", json(r));
        } else {
            print!("{}", rendering_text(r));
        }
    }

    async fn run(&mut self, line: &str) -> Result<Step, Failure> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some((&command, rest)) = words.split_first() else {
            return Ok(Step::Continue);
        };
        let id = self.id.clone();
        let number = |what: &str| -> Result<u32, Failure> {
            rest.first()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| Failure::Usage(format!("{what} needs a number")))
        };
        let c = &mut self.client;
        let rendering = match command {
            "q" | "quit" | "exit" => return Ok(Step::Quit),
            "help" | "h" | "?" => {
                println!("{HELP}");
                return Ok(Step::Continue);
            }
            "u" | "up" | "pop" => {
                c.pop(PopRequest { inspector_id: id })
                    .await?
                    .into_inner()
                    .rendering
            }
            "n" | "next" => {
                c.next_page(NextPageRequest { inspector_id: id })
                    .await?
                    .into_inner()
                    .rendering
            }
            "p" | "prev" => {
                c.previous_page(PreviousPageRequest { inspector_id: id })
                    .await?
                    .into_inner()
                    .rendering
            }
            "]" | "sibling" => {
                c.next_sibling(NextSiblingRequest { inspector_id: id })
                    .await?
                    .into_inner()
                    .rendering
            }
            "[" | "back" => {
                c.previous_sibling(PreviousSiblingRequest { inspector_id: id })
                    .await?
                    .into_inner()
                    .rendering
            }
            "v" | "view" => {
                c.toggle_view_mode(ToggleViewModeRequest { inspector_id: id })
                    .await?
                    .into_inner()
                    .rendering
            }
            "pretty" => {
                c.toggle_pretty_print(TogglePrettyPrintRequest { inspector_id: id })
                    .await?
                    .into_inner()
                    .rendering
            }
            "r" | "refresh" => {
                c.refresh(RefreshRequest {
                    inspector_id: id,
                    config: None,
                })
                .await?
                .into_inner()
                .rendering
            }
            "page-size" => {
                let n = number("page-size")?;
                c.refresh(RefreshRequest {
                    inspector_id: id,
                    config: Some(InspectorConfig {
                        page_size: Some(n),
                        ..Default::default()
                    }),
                })
                .await?
                .into_inner()
                .rendering
            }
            "a" | "analytics" => {
                let cutoff = rest.first().and_then(|n| n.parse().ok()).unwrap_or(0);
                let answer = c
                    .show_analytics(ShowAnalyticsRequest {
                        inspector_id: id,
                        cutoff,
                    })
                    .await?
                    .into_inner();
                if self.json {
                    print_json(&answer);
                    return Ok(Step::Continue);
                }
                answer.rendering
            }
            "print" => {
                let chunk_size = rest.first().and_then(|n| n.parse().ok()).unwrap_or(0);
                let mut stream = c
                    .print_value(PrintValueRequest {
                        inspector_id: id,
                        chunk_size,
                    })
                    .await?
                    .into_inner();
                let mut stdout = std::io::stdout().lock();
                while let Some(chunk) = stream.message().await? {
                    if self.json {
                        writeln!(stdout, "{}", json(&chunk)).ok();
                    } else {
                        stdout.write_all(chunk.chunk.as_bytes()).ok();
                        if chunk.last {
                            writeln!(stdout).ok();
                        }
                    }
                }
                return Ok(Step::Continue);
            }
            "pin" => {
                let name = rest
                    .first()
                    .ok_or_else(|| Failure::Usage("pin needs a name".into()))?;
                let answer = c
                    .pin_value(PinValueRequest {
                        inspector_id: id,
                        name: (*name).to_owned(),
                    })
                    .await?
                    .into_inner();
                if self.json {
                    print_json(&answer);
                } else {
                    println!("pinned as {}", answer.name);
                }
                return Ok(Step::Continue);
            }
            "tap" => {
                let r = match rest.first().and_then(|n| n.parse().ok()) {
                    Some(idx) => {
                        c.tap_indexed(TapIndexedRequest {
                            inspector_id: id,
                            idx,
                        })
                        .await?
                        .into_inner()
                        .rendering
                    }
                    None => {
                        c.tap_value(TapValueRequest { inspector_id: id })
                            .await?
                            .into_inner()
                            .rendering
                    }
                };
                if !self.json {
                    println!("tapped");
                    return Ok(Step::Continue);
                }
                r
            }
            other => {
                let idx = match (other, rest.first()) {
                    ("push", Some(n)) => n.parse().ok(),
                    (n, None) => n.parse().ok(),
                    _ => None,
                }
                .ok_or_else(|| {
                    Failure::Usage(format!("unknown command {line:?}; `help` lists them"))
                })?;
                c.push(PushRequest {
                    inspector_id: id,
                    idx,
                })
                .await?
                .into_inner()
                .rendering
            }
        };
        if let Some(r) = rendering {
            self.show(&r);
        }
        Ok(Step::Continue)
    }
}

/// `stepctl inspect`.
pub async fn run(channel: Channel, args: InspectArgs, json_out: bool) -> Result<(), Failure> {
    let (session_id, source) = source(&args)?;
    let mut client = client!(InspectorServiceClient, channel);
    let config = InspectorConfig {
        page_size: args.page_size,
        view_mode: match args.view {
            None => ViewMode::Unspecified,
            Some(View::Normal) => ViewMode::Normal,
            Some(View::Table) => ViewMode::Table,
            Some(View::Object) => ViewMode::Object,
        }
        .into(),
        ..Default::default()
    };
    let root = client
        .inspect(InspectRequest {
            session_id,
            source: Some(InspectSource {
                source: Some(source),
            }),
            config: Some(config),
        })
        .await?
        .into_inner()
        .rendering
        .ok_or_else(|| Failure::Other(anyhow::anyhow!("the daemon sent no rendering")))?;
    let mut session = Session {
        client,
        id: root.inspector_id.clone(),
        json: json_out,
    };
    session.show(&root);
    let outcome = if args.commands.is_empty() {
        interactive(&mut session).await
    } else {
        let mut result = Ok(());
        for command in &args.commands {
            match session.run(command).await {
                Ok(Step::Continue) => {}
                Ok(Step::Quit) => break,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        result
    };
    if args.keep {
        if !json_out {
            println!("inspector {} kept", session.id);
        }
    } else {
        let _ = session
            .client
            .clear(ClearRequest {
                inspector_id: session.id.clone(),
            })
            .await;
    }
    outcome
}

/// Words Tab completes at `inspect>`.
const WORDS: &[&str] = &[
    "push",
    "up",
    "pop",
    "next",
    "prev",
    "sibling",
    "back",
    "view",
    "pretty",
    "page-size",
    "refresh",
    "analytics",
    "print",
    "pin",
    "tap",
    "quit",
    "exit",
    "help",
];

/// Reads commands until EOF or `quit` (at a terminal: the line editor of
/// `stepctl debug`, with its own history); a failing command is reported and
/// the next one read.
async fn interactive(session: &mut Session) -> Result<(), Failure> {
    let mut terminal = Terminal::start(
        History {
            env_var: "STEPCTL_INSPECT_HISTORY",
            file: "inspect_history",
        },
        Vocabulary {
            commands: WORDS.iter().map(|w| (*w).to_owned()).collect(),
            ..Default::default()
        },
    );
    let prompt = if terminal.interactive {
        "inspect> "
    } else {
        ""
    };
    loop {
        let line = match terminal.read(prompt).await {
            Input::Line(line) => line,
            Input::Interrupted => continue,
            Input::Eof => break,
        };
        match session.run(&line).await {
            Ok(Step::Continue) => {}
            Ok(Step::Quit) => break,
            Err(failure) => report(&failure, session.json),
        }
    }
    terminal.finish("");
    Ok(())
}

fn report(failure: &Failure, json_out: bool) {
    match failure {
        Failure::Status(status) if !json_out => eprintln!("{}", status_line(status)),
        other => {
            let _ = other.report(json_out);
        }
    }
}

fn status_line(status: &Status) -> String {
    use tonic_types::StatusExt;
    let reason = status
        .get_details_error_info()
        .map(|i| i.reason)
        .unwrap_or_default();
    format!("error: {} ({reason})", status.message())
}
