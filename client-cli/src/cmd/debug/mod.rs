//! `stepctl debug`: an interactive loop over one session. It shows each pause
//! as it arrives (location, code, locals, value), the program's output, trace
//! steps, stacks and errors, and answers pauses with short commands, all on one
//! `Subscribe` stream. Other clients may answer the same pauses meanwhile.

mod breakpoints;
mod commands;
mod frames;
mod help;
mod incoming;
mod restart;
mod source;
mod threads;
mod values;

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::Instant,
};

use clap::Args;
use stepd_proto::v1::{
    AddBreakpointRequest, BreakpointSpec, CommandKind, DebugCommand, DebugInput, Event,
    GetSessionRequest, ListSessionsRequest, NoWait, Pause, PauseRequest, SessionState,
    SubscribeRequest, SubscribeResponse, Watch, breakpoint_service_client::BreakpointServiceClient,
    breakpoint_spec::Location, debug_command::Command, event::Payload,
    event_service_client::EventServiceClient, pause_request,
    session_service_client::SessionServiceClient, subscribe_request::Message,
};
use tokio::sync::mpsc;
use tokio_stream::{StreamExt, wrappers::ReceiverStream};
use tonic::Streaming;

use self::commands::{Action, alias, parse_line};
use crate::{
    cmd::{
        breakpoints::parse_source,
        sessions::{AdapterArgs, ContextArgs, LaunchArgs, launch_request},
    },
    colour,
    connect::{Channel, client},
    exit::Failure,
    line_editor::{History, Input, Terminal, Vocabulary},
    render::{
        events,
        pauses::{commands_text, reason_text, where_text},
        sessions::{end_text, placements, session_line},
    },
};

/// Client name shown in `pause_resolved.by` when `stepctl debug` answers.
pub const CLIENT_NAME: &str = "stepctl debug";

/// Arguments of `debug`.
#[derive(Debug, Args)]
pub struct DebugArgs {
    /// The session to debug (default: the only live one). With --launch: the
    /// program's arguments (those starting with '-' go after `--`).
    #[arg(value_name = "SESSION | ARGS")]
    pub rest: Vec<String>,
    /// Launch this program first and debug the new session; a relative path is
    /// made absolute.
    #[arg(long, value_name = "PROGRAM")]
    pub launch: Option<String>,
    #[command(flatten)]
    pub adapter: AdapterArgs,
    /// With --launch: working directory of the program (default: this
    /// shell's when the daemon runs here as you, else the daemon's).
    #[arg(long, requires = "launch")]
    pub cwd: Option<String>,
    /// With --launch: environment variable KEY=VALUE (repeatable), on top of
    /// this shell's environment when the daemon runs here as you.
    #[arg(long = "env", value_name = "K=V", requires = "launch")]
    pub env: Vec<String>,
    #[command(flatten)]
    pub context: ContextArgs,
    /// With --launch: stop before the first line of user code.
    #[arg(long, requires = "launch")]
    pub stop_on_entry: bool,
    /// Add a source breakpoint FILE:LINE first (repeatable).
    #[arg(long = "break", value_name = "FILE:LINE")]
    pub breaks: Vec<String>,
}

/// `stepctl debug`.
pub async fn run(channel: Channel, args: DebugArgs) -> Result<(), Failure> {
    // Launched here: the session gets a label of its own, which this loop's
    // breakpoints select (a session attached to keeps the label it has).
    let mut scope = match &args.launch {
        Some(_) => breakpoints::Scope::new_label(),
        None => breakpoints::Scope::default(),
    };
    for text in &args.breaks {
        let spec = BreakpointSpec {
            location: Some(Location::Source(parse_source(text)?)),
            label_selector: scope.selector(),
            ..Default::default()
        };
        let bp = client!(BreakpointServiceClient, channel.clone())
            .add_breakpoint(AddBreakpointRequest { spec: Some(spec) })
            .await?
            .into_inner()
            .breakpoint
            .unwrap_or_default();
        println!("breakpoint {} at {text}", bp.id);
    }
    let (tx, rx) = mpsc::channel(16);
    let stream = Stream { tx, cursor: 0 };
    let session_id;
    let mut events;
    let mut launched = None;
    let instance_id;
    if let Some(program) = args.launch {
        // Follow everything until the session exists, then narrow the filter
        // and resume from the first snapshot: nothing the program did before
        // the second Watch is lost (duplicates are skipped by seq).
        stream.watch(Vec::new(), 0, String::new()).await?;
        events = subscribe(channel.clone(), rx).await?;
        let snapshot = first_snapshot(&mut events).await?;
        let (mut request, note) = launch_request(LaunchArgs {
            program,
            args: args.rest,
            adapter: args.adapter,
            cwd: args.cwd,
            env: args.env,
            stop_on_entry: args.stop_on_entry,
            context: args.context,
        })?;
        if let Some(note) = note {
            println!("{note}");
        }
        scope.label(&mut request.labels);
        values::show_return_values(&mut request);
        launched = Some(request.clone());
        instance_id = snapshot.instance_id.clone();
        let r = client!(SessionServiceClient, channel.clone())
            .launch(request)
            .await?
            .into_inner();
        let session = r.session.unwrap_or_default();
        println!("{}", session_line("launched", &session));
        if !r.breakpoints.is_empty() {
            println!("{}", placements(&r.breakpoints));
        }
        session_id = session.id;
        stream
            .watch(
                vec![session_id.clone()],
                snapshot.seq,
                snapshot.instance_id.clone(),
            )
            .await?;
    } else {
        if args.rest.len() > 1 {
            return Err(Failure::Usage(
                "debug takes one SESSION (program arguments go with --launch)".into(),
            ));
        }
        session_id = match args.rest.into_iter().next() {
            Some(id) => id,
            None => only_live_session(channel.clone()).await?,
        };
        let session = client!(SessionServiceClient, channel.clone())
            .get_session(GetSessionRequest {
                session_id: session_id.clone(),
            })
            .await?
            .into_inner()
            .session
            .unwrap_or_default();
        if session.state == SessionState::Ended as i32 {
            println!(
                "session {session_id} already ended: {}",
                end_text(session.end_reason, session.exit_code, &session.signal)
            );
            return Ok(());
        }
        println!("{}", session_line("attached", &session));
        scope = breakpoints::Scope::of(&session.labels);
        instance_id = String::new();
        stream
            .watch(vec![session_id.clone()], 0, String::new())
            .await?;
        events = subscribe(channel.clone(), rx).await?;
    }
    let names = Arc::new(Mutex::new(Vec::new()));
    let (words, arguments) = commands::vocabulary();
    let terminal = Terminal::start(
        History {
            env_var: "STEPCTL_HISTORY",
            file: "debug_history",
        },
        Vocabulary {
            commands: words,
            path_commands: commands::PATH_COMMANDS
                .iter()
                .map(|c| (*c).to_owned())
                .collect(),
            arguments,
            names: names.clone(),
        },
    );
    let mut debugger = Debugger {
        session_id,
        channel,
        stream,
        terminal,
        pending: Vec::new(),
        snapshot_parts: None,
        current: None,
        expression_for: None,
        waiting: None,
        evals: HashSet::new(),
        last_line: None,
        view: frames::View::default(),
        names,
        added: HashSet::new(),
        answered: HashSet::new(),
        scope,
        launched,
        instance_id,
        deferred: None,
    };
    debugger.print("type ? for help, exit to leave (the session goes on)".into());
    let end = debugger.run(&mut events).await;
    debugger.terminal.finish(&end);
    Ok(())
}

async fn subscribe(
    channel: Channel,
    rx: mpsc::Receiver<SubscribeRequest>,
) -> Result<Streaming<SubscribeResponse>, Failure> {
    Ok(client!(EventServiceClient, channel)
        .subscribe(ReceiverStream::new(rx))
        .await?
        .into_inner())
}

/// A large snapshot comes in parts (`more` set on all but the last): the
/// whole snapshot once its last part is in, `None` while parts are missing.
pub fn merge_part(
    parts: &mut Option<stepd_proto::v1::Snapshot>,
    part: stepd_proto::v1::Snapshot,
) -> Option<stepd_proto::v1::Snapshot> {
    let more = part.more;
    match parts {
        Some(whole) if part.part > 0 && part.seq == whole.seq => {
            whole.sessions.extend(part.sessions);
            whole.pauses.extend(part.pauses);
            whole.breakpoints.extend(part.breakpoints);
            whole.breakpoint_statuses.extend(part.breakpoint_statuses);
        }
        _ => *parts = Some(part),
    }
    if more {
        return None;
    }
    let mut whole = parts.take()?;
    whole.more = false;
    Some(whole)
}

async fn first_snapshot(
    events: &mut Streaming<SubscribeResponse>,
) -> Result<stepd_proto::v1::Snapshot, Failure> {
    let mut parts = None;
    while let Some(response) = events.next().await {
        if let Some(Payload::Snapshot(s)) = response?.event.and_then(|e| e.payload)
            && let Some(whole) = merge_part(&mut parts, s)
        {
            return Ok(whole);
        }
    }
    Err(Failure::Other(anyhow::anyhow!(
        "the event stream ended before its snapshot"
    )))
}

/// The id of the only live session; a usage error listing them otherwise.
async fn only_live_session(channel: Channel) -> Result<String, Failure> {
    let mut client = client!(SessionServiceClient, channel);
    let mut sessions = Vec::new();
    let mut request = ListSessionsRequest::default();
    loop {
        let page = client.list_sessions(request.clone()).await?.into_inner();
        sessions.extend(page.sessions);
        if page.next_page_token.is_empty() {
            break;
        }
        request.page_token = page.next_page_token;
    }
    let live: Vec<_> = sessions
        .iter()
        .filter(|s| s.state != SessionState::Ended as i32)
        .map(|s| s.id.clone())
        .collect();
    match live.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(Failure::Usage(
            "no live session; give --launch PROGRAM or start one".into(),
        )),
        many => Err(Failure::Usage(format!(
            "several live sessions ({}); name one",
            many.join(", ")
        ))),
    }
}

/// The client side of the Subscribe stream.
struct Stream {
    tx: mpsc::Sender<SubscribeRequest>,
    /// Highest seq handled; replayed duplicates are skipped.
    cursor: u64,
}

impl Stream {
    async fn send(&self, message: Message) -> Result<(), Failure> {
        self.tx
            .send(SubscribeRequest {
                message: Some(message),
            })
            .await
            .map_err(|_| Failure::Other(anyhow::anyhow!("the event stream is closed")))
    }

    async fn watch(
        &self,
        session_ids: Vec<String>,
        resume_after_seq: u64,
        resume_instance_id: String,
    ) -> Result<(), Failure> {
        self.send(Message::Watch(Watch {
            session_ids,
            channels: Vec::new(),
            resume_after_seq,
            client_name: CLIENT_NAME.into(),
            resume_instance_id,
        }))
        .await
    }
}
/// How long a new stop waits for the program output that preceded it.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_millis(100);

/// How long a moving command whose pause resolved may show no progress
/// while other pauses stay pending before the loop says the program is held.
const HELD_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The command whose outcome the loop waits for. Only its own outcome ends
/// the wait: another thread's stop arriving meanwhile is not it.
struct Waiting {
    /// The pause the command went to (empty for `pause`).
    key: String,
    /// The command lets the program run (n, s, c, t, …): any new stop, or
    /// the end, is its outcome.
    moves: bool,
    /// Set when its pause resolved while other pauses stayed pending: the
    /// last sign of progress since.
    held_since: Option<Instant>,
    /// It evaluates code: a failure comes twice, as an `eval_error` event
    /// to every client and as the call's own error, in either order.
    evaluates: bool,
    /// The `eval_error` came (and was shown).
    failed: bool,
    /// The call's own error came, not shown since the `eval_error` says it
    /// (shown after all if that never comes).
    refused: Option<String>,
}

fn expects_expression(pause: &Pause) -> bool {
    pause.input_type == [CommandKind::Expression as i32]
}

/// The loop's state.
struct Debugger {
    session_id: String,
    channel: Channel,
    stream: Stream,
    terminal: Terminal,
    /// Pending pauses of the session, in arrival order.
    pending: Vec<Pause>,
    /// The parts of a snapshot that came so far, when it comes in parts.
    snapshot_parts: Option<stepd_proto::v1::Snapshot>,
    /// The pause commands go to.
    current: Option<String>,
    /// `e` alone was sent to this pause: the next line is the expression.
    expression_for: Option<String>,
    /// A command was sent and its outcome has not shown yet (lines from a
    /// non-terminal stdin wait for it).
    waiting: Option<Waiting>,
    /// Pauses with an evaluation of ours in flight (their value is shown even
    /// when unchanged).
    evals: HashSet<String>,
    last_line: Option<String>,
    /// Frame selection, the stack, displays and `list`'s place.
    view: frames::View,
    /// Names Tab completes in arguments: the selected frame's locals.
    names: Arc<Mutex<Vec<String>>>,
    /// Breakpoints added here, whose placement is reported.
    added: HashSet<String>,
    /// Pauses this loop answered: their resolution needs no words.
    answered: HashSet<String>,
    /// Which sessions `b` applies to, and the `tbreak`s to delete on a hit.
    scope: breakpoints::Scope,
    /// The launch this loop made, which `restart` makes again.
    launched: Option<stepd_proto::v1::LaunchRequest>,
    /// The daemon instance the stream's cursor belongs to (empty: trusted).
    instance_id: String,
    /// A new stop held back until STOP_GRACE passes, for late output.
    deferred: Option<(Event, Instant)>,
}

/// How the loop ended.
enum Flow {
    Go,
    End(String),
}

impl Debugger {
    fn print(&mut self, text: String) {
        self.terminal.print(&text);
    }

    fn say(&mut self, lines: Vec<String>) {
        if !lines.is_empty() {
            self.terminal.print(&lines.join("\n"));
        }
    }

    fn error(&mut self, text: &str) {
        self.terminal.print(&colour::error(text));
    }

    fn current_pause(&self) -> Option<&Pause> {
        let key = self.current.as_ref()?;
        self.pending.iter().find(|p| &p.key == key)
    }

    fn prompt(&self) -> String {
        // A prompt cannot change while a line is being read, so it says
        // nothing that a later event could make stale.
        if self.expression_for.is_some() || self.current_pause().is_some_and(expects_expression) {
            "expression> ".into()
        } else {
            "(stepd) ".into()
        }
    }

    fn ready_for_input(&self) -> bool {
        self.terminal.interactive
            || (self.waiting.is_none()
                && (!self.pending.is_empty() || self.expression_for.is_some()))
    }

    async fn run(&mut self, events: &mut Streaming<SubscribeResponse>) -> String {
        loop {
            if !self.terminal.asked && self.ready_for_input() {
                let prompt = self.prompt();
                self.terminal.ask(&prompt);
            }
            let partial_due = self.terminal.partial_due();
            let stop_due = self.deferred.as_ref().map(|(_, due)| *due);
            let held_due = self
                .waiting
                .as_ref()
                .and_then(|w| w.held_since)
                .map(|since| since + HELD_WAIT);
            let flow = tokio::select! {
                next = events.next() => match next {
                    Some(Ok(response)) => match response.event {
                        Some(event) => self.on_event(event),
                        None => Flow::Go,
                    },
                    Some(Err(status)) => Flow::End(format!(
                        "the event stream failed: {}; the session {} goes on",
                        status.message(),
                        self.session_id
                    )),
                    None => Flow::End(format!(
                        "the daemon closed the event stream; the session {} goes on",
                        self.session_id
                    )),
                },
                input = self.terminal.lines.recv(), if self.terminal.asked => {
                    self.terminal.asked = false;
                    match input {
                        Some(Input::Line(line)) => self.on_line(&line).await,
                        Some(Input::Interrupted) => {
                            self.print("^C (exit leaves stepctl; the session goes on)".into());
                            Flow::Go
                        }
                        Some(Input::Eof) | None => Flow::End(format!(
                            "leaving; the session {} goes on",
                            self.session_id
                        )),
                    }
                }
                _ = tokio::time::sleep_until(partial_due.unwrap_or_else(Instant::now).into()),
                    if partial_due.is_some() => {
                    self.terminal.flush_partial();
                    Flow::Go
                }
                _ = tokio::time::sleep_until(stop_due.unwrap_or_else(Instant::now).into()),
                    if stop_due.is_some() => self.show_deferred(),
                _ = tokio::time::sleep_until(held_due.unwrap_or_else(Instant::now).into()),
                    if held_due.is_some() => {
                    self.held();
                    Flow::Go
                }
            };
            if let Flow::End(last) = flow {
                return last;
            }
            // A new stop shows the displays, evaluated in its frame.
            if let Some(key) = self.view.display_due.take()
                && self.current.as_deref() == Some(key.as_str())
            {
                self.show_displays().await;
            }
            self.delete_spent().await;
        }
    }

    async fn on_line(&mut self, line: &str) -> Flow {
        let mut line = line.trim().to_owned();
        let expression_asked =
            self.expression_for.is_some() || self.current_pause().is_some_and(expects_expression);
        if line.is_empty() {
            // Enter repeats the last command, as in pdb and gdb.
            match &self.last_line {
                Some(last) if !expression_asked => line = last.clone(),
                _ => return Flow::Go,
            }
        }
        if line == "!!" {
            match &self.last_line {
                Some(last) => {
                    line = last.clone();
                    self.print(format!("!! {line}"));
                }
                None => {
                    self.print("no command to repeat".into());
                    return Flow::Go;
                }
            }
        } else {
            self.last_line = Some(line.clone());
        }
        // An expression asked for by an EVAL without code.
        let asked = self.expression_for.take().or_else(|| {
            self.current_pause()
                .filter(|p| expects_expression(p))
                .map(|p| p.key.clone())
        });
        if let Some(key) = asked {
            self.evals.insert(key.clone());
            // Answered: the pause no longer asks (until it is re-sent).
            if let Some(pause) = self.pending.iter_mut().find(|p| p.key == key)
                && expects_expression(pause)
            {
                pause.input_type.clear();
            }
            return self
                .answer(
                    key,
                    Command::Expression(stepd_proto::v1::ExpressionCommand { code: line }),
                )
                .await;
        }
        let action = match parse_line(&line) {
            Ok(action) => action,
            Err(message) => {
                self.error(&message);
                return Flow::Go;
            }
        };
        match action {
            Action::Help(word) => self.help(word.as_deref()),
            Action::Exit => {
                return Flow::End(format!("leaving; the session {} goes on", self.session_id));
            }
            Action::Pauses => self.list_pauses(),
            Action::Switch(which) => self.switch(&which),
            Action::PauseProgram => self.pause_program().await,
            Action::Print(expression) => return self.print_expression(&expression).await,
            Action::Backtrace => return self.backtrace().await,
            Action::Move(by) => self.move_frame(by).await,
            Action::Frame(index) => self.select_frame(index).await,
            Action::InfoLocals => self.info_locals().await,
            Action::Display(expression) => self.display(expression).await,
            Action::Undisplay(index) => self.undisplay(index),
            Action::InfoDisplay => self.info_display(),
            Action::List(arg) => self.list(arg.as_deref()).await,
            Action::Break {
                location,
                condition,
                global,
                temporary,
            } => {
                self.add_breakpoint(&location, &condition, global, temporary)
                    .await
            }
            Action::Condition(id, condition) => self.set_condition(&id, condition).await,
            Action::Ignore(id, count) => self.ignore(&id, count).await,
            Action::Enable(ids, on) => self.enable(ids, on).await,
            Action::Delete(ids) => self.delete(ids).await,
            Action::Watch(expression) => self.watch(&expression).await,
            Action::Jump(line) => return self.jump(&line).await,
            Action::Statement(code) => self.statement(&code).await,
            Action::Assign(name, value) => self.assign(&name, &value).await,
            Action::PrettyPrint(expression) => self.pretty_print(&expression).await,
            Action::WhatIs(expression) => self.what_is(&expression).await,
            Action::Args => self.args().await,
            Action::LongList => self.long_list().await,
            Action::Retval => self.retval().await,
            Action::Restart => return self.restart().await,
            Action::Threads => self.threads().await,
            Action::Thread(id) => self.thread(id).await,
            Action::Clear(arg) => self.clear(arg.as_deref()).await,
            Action::InfoBreakpoints => self.info_breakpoints().await,
            Action::Until(line) => match self.until_target(line) {
                Ok(command) => return self.send(command).await,
                Err(message) => self.error(&message),
            },
            Action::Send(command) => return self.send(command).await,
        }
        Flow::Go
    }

    fn help(&mut self, word: Option<&str>) {
        let Some(mut text) = help::help(word) else {
            self.error(&format!(
                "unknown command {:?} (? lists the commands)",
                word.unwrap_or_default()
            ));
            return;
        };
        if word.is_none() {
            match self.current_pause() {
                Some(pause) => {
                    let offered: Vec<String> = pause.input_type.iter().map(|k| alias(*k)).collect();
                    text.push_str(&format!(
                        "\noffered at pause {}: {}",
                        pause.key,
                        offered.join(" ")
                    ));
                }
                None => {
                    text.push_str("\nno pause pending: the program is running (pause pauses it)")
                }
            }
        }
        self.print(text);
    }

    fn list_pauses(&mut self) {
        let lines = if self.pending.is_empty() {
            vec!["no pauses pending".to_owned()]
        } else {
            self.pending
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let mark = if self.current.as_ref() == Some(&p.key) {
                        "*"
                    } else {
                        " "
                    };
                    format!(
                        "{mark} {} {}  thread {}  {}  {}  ({})",
                        i + 1,
                        p.key,
                        p.thread_id,
                        reason_text(p.reason),
                        colour::location(&p.location.as_ref().map(where_text).unwrap_or_default()),
                        commands_text(&p.input_type)
                    )
                })
                .collect()
        };
        self.say(lines);
    }

    fn switch(&mut self, which: &str) {
        let found = which
            .parse::<usize>()
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| self.pending.get(i))
            .or_else(|| self.pending.iter().find(|p| p.key == which))
            .cloned();
        match found {
            Some(pause) => {
                self.current = Some(pause.key.clone());
                self.refresh_names();
                let mut lines = vec![format!("commands now go to pause {}", pause.key)];
                lines.extend(events::pause_text(&pause));
                self.say(lines);
            }
            None => self.error(&format!("no pending pause {which} (pauses lists them)")),
        }
    }

    async fn pause_program(&mut self) {
        self.waiting = Some(Waiting {
            key: String::new(),
            moves: true,
            held_since: None,
            evaluates: false,
            failed: false,
            refused: None,
        });
        let result = client!(SessionServiceClient, self.channel.clone())
            .pause(PauseRequest {
                session_id: self.session_id.clone(),
                thread_id: 0,
                wait: Some(pause_request::Wait::NoWait(NoWait {})),
            })
            .await;
        if let Err(status) = result {
            self.waiting = None;
            self.error(&format!("pause failed: {}", status.message()));
        }
    }

    /// The current pause's key, or a message saying the program runs.
    fn current_key(&mut self) -> Option<String> {
        let key = self
            .current
            .clone()
            .filter(|_| self.current_pause().is_some());
        if key.is_none() {
            self.error("no pause pending: the program is running (pause pauses it)");
        }
        key
    }

    /// Answers the current pause with `command`.
    async fn send(&mut self, command: Command) -> Flow {
        let Some(key) = self.current_key() else {
            return Flow::Go;
        };
        match &command {
            Command::Eval(eval) if eval.code.is_empty() => {
                self.expression_for = Some(key.clone());
            }
            Command::Eval(_) => {
                self.evals.insert(key.clone());
            }
            _ => {}
        }
        self.answer(key, command).await
    }

    async fn answer(&mut self, key: String, command: Command) -> Flow {
        let keeps_the_pause = matches!(
            command,
            Command::Eval(_)
                | Command::Expression(_)
                | Command::Stacktrace(_)
                | Command::Inspect(_)
                | Command::InspectPrompt(_)
                | Command::Locals(_)
        );
        if !keeps_the_pause {
            self.answered.insert(key.clone());
        }
        self.waiting = Some(Waiting {
            key: key.clone(),
            moves: !keeps_the_pause,
            held_since: None,
            evaluates: matches!(command, Command::Eval(_) | Command::Expression(_)),
            failed: false,
            refused: None,
        });
        let sent = self
            .stream
            .send(Message::DebugInput(DebugInput {
                key,
                command: Some(DebugCommand {
                    command: Some(command),
                }),
                client_name: String::new(),
            }))
            .await;
        match sent {
            Ok(()) => Flow::Go,
            Err(_) => Flow::End("the event stream is closed".into()),
        }
    }
}
