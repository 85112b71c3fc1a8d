//! `stepctl debug`: an interactive loop over one session. It shows each pause
//! as it arrives (location, code, locals, value), the program's output, trace
//! steps, stacks and errors, and answers pauses with short commands, all on one
//! `Subscribe` stream. Other clients may answer the same pauses meanwhile.

use crate::connect::client;
use std::{
    collections::HashSet,
    io::{BufRead, IsTerminal, Write},
    path::PathBuf,
    sync::mpsc as std_mpsc,
};

use clap::Args;
use rustyline::{Config, DefaultEditor, ExternalPrinter, error::ReadlineError};
use stepd_proto::v1::{
    AddBreakpointRequest, BreakpointSpec, CommandKind, DebugCommand, DebugInput, EndReason, Event,
    GetSessionRequest, ListSessionsRequest, NoWait, NotificationLevel, Pause, PauseRequest,
    SessionState, SubscribeRequest, SubscribeResponse, Watch,
    breakpoint_service_client::BreakpointServiceClient, breakpoint_spec::Location,
    debug_command::Command, event::Payload, event_service_client::EventServiceClient,
    pause_request, session_service_client::SessionServiceClient, subscribe_request::Message,
};
use tokio::sync::mpsc;
use tokio_stream::{StreamExt, wrappers::ReceiverStream};
use tonic::Streaming;

use crate::connect::Channel;

use crate::{
    cmd::{
        breakpoints::parse_source,
        sessions::{
            AdapterArgs, LaunchArgs, command_word, commands_text, debug_command, display, end_text,
            launch_request, location_lines, pause_details, placements, reason_text, session_line,
            where_text,
        },
    },
    exit::Failure,
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
    /// With --launch: working directory of the program.
    #[arg(long, requires = "launch")]
    pub cwd: Option<String>,
    /// With --launch: environment variable KEY=VALUE (repeatable).
    #[arg(long = "env", value_name = "K=V", requires = "launch")]
    pub env: Vec<String>,
    /// With --launch: stop before the first line of user code.
    #[arg(long, requires = "launch")]
    pub stop_on_entry: bool,
    /// Add a source breakpoint FILE:LINE first (repeatable).
    #[arg(long = "break", value_name = "FILE:LINE")]
    pub breaks: Vec<String>,
}

/// `stepctl debug`.
pub async fn run(channel: Channel, args: DebugArgs) -> Result<(), Failure> {
    for text in &args.breaks {
        let spec = BreakpointSpec {
            location: Some(Location::Source(parse_source(text)?)),
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
    if let Some(program) = args.launch {
        // Follow everything until the session exists, then narrow the filter
        // and resume from the first snapshot: nothing the program did before
        // the second Watch is lost (duplicates are skipped by seq).
        stream.watch(Vec::new(), 0, String::new()).await?;
        events = subscribe(channel.clone(), rx).await?;
        let snapshot = first_snapshot(&mut events).await?;
        let request = launch_request(LaunchArgs {
            program,
            args: args.rest,
            adapter: args.adapter,
            cwd: args.cwd,
            env: args.env,
            stop_on_entry: args.stop_on_entry,
        })?;
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
        stream
            .watch(vec![session_id.clone()], 0, String::new())
            .await?;
        events = subscribe(channel.clone(), rx).await?;
    }
    let terminal = Terminal::start();
    let mut debugger = Debugger {
        session_id,
        channel,
        stream,
        terminal,
        pending: Vec::new(),
        snapshot_parts: None,
        current: None,
        expression_for: None,
        waiting: false,
        evals: HashSet::new(),
        last_line: None,
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

/// One line from the terminal (or stdin).
enum Input {
    Line(String),
    Interrupted,
    Eof,
}

/// Line input and output that does not disturb the line being typed: on a
/// terminal, rustyline (editing, history) with output printed above the
/// prompt; otherwise plain lines, read one at a time when asked for.
struct Terminal {
    ask: std_mpsc::Sender<String>,
    lines: mpsc::UnboundedReceiver<Input>,
    printer: Option<Box<dyn ExternalPrinter + Send>>,
    saved: Option<libc::termios>,
    interactive: bool,
    /// A line has been asked for and not yet received.
    asked: bool,
}

/// Where the command history is kept: `STEPCTL_HISTORY` (empty: nowhere),
/// else `$XDG_STATE_HOME/stepd/debug_history`, else `~/.local/state/stepd/debug_history`.
fn history_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("STEPCTL_HISTORY") {
        return (!path.is_empty()).then(|| PathBuf::from(path));
    }
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))?;
    Some(base.join("stepd/debug_history"))
}

impl Terminal {
    fn start() -> Self {
        let interactive = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
        let (ask, asks) = std_mpsc::channel::<String>();
        let (line_tx, lines) = mpsc::unbounded_channel();
        let mut saved = None;
        let mut printer = None;
        if interactive {
            // rustyline restores the terminal when readline returns; stepctl
            // may leave while a readline is in progress, so keep the mode to
            // restore it then.
            let mut termios = std::mem::MaybeUninit::<libc::termios>::uninit();
            // SAFETY: tcgetattr fills the struct when it returns 0.
            if unsafe { libc::tcgetattr(0, termios.as_mut_ptr()) } == 0 {
                // SAFETY: initialised by the successful call above.
                saved = Some(unsafe { termios.assume_init() });
            }
            let (printer_tx, printer_rx) = std_mpsc::channel();
            std::thread::spawn(move || editor_thread(asks, line_tx, printer_tx));
            printer = printer_rx.recv().ok().flatten();
        } else {
            std::thread::spawn(move || {
                let stdin = std::io::stdin();
                for _ in asks {
                    let mut line = String::new();
                    let input = match stdin.lock().read_line(&mut line) {
                        Ok(0) | Err(_) => Input::Eof,
                        Ok(_) => Input::Line(line.trim_end_matches(['\n', '\r']).to_owned()),
                    };
                    if line_tx.send(input).is_err() {
                        break;
                    }
                }
            });
        }
        Self {
            ask,
            lines,
            printer,
            saved,
            interactive,
            asked: false,
        }
    }

    /// Asks for the next line, showing `prompt` on a terminal.
    fn ask(&mut self, prompt: &str) {
        if !self.asked {
            self.asked = self.ask.send(prompt.to_owned()).is_ok();
        }
    }

    fn print(&mut self, text: &str) {
        match &mut self.printer {
            Some(printer) => {
                let _ = printer.print(format!("{text}\n"));
            }
            None => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{text}");
                let _ = out.flush();
            }
        }
    }

    /// Prints the last words and gives the terminal back as it was.
    fn finish(mut self, last: &str) {
        let Some(mut printer) = self.printer.take() else {
            println!("{last}");
            return;
        };
        let _ = printer.print(format!("{last}\n"));
        if self.asked {
            // The printer hands messages to the editor thread one at a time;
            // once two more were taken, the last words are on the screen.
            let _ = printer.print(String::new());
            let _ = printer.print(String::new());
            // The editor is still in its readline: silence it, then erase the
            // prompt it drew again.
            // SAFETY: plain descriptor operations on stdout; `tty` is ours.
            unsafe {
                let tty = libc::dup(1);
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
                if tty >= 0 && null >= 0 {
                    libc::dup2(null, 1);
                    let erase = b"\r\x1b[K";
                    libc::write(tty, erase.as_ptr().cast(), erase.len());
                }
            }
        }
        if let Some(saved) = &self.saved {
            // SAFETY: restores attributes read from the same descriptor.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, saved) };
        }
    }
}

/// Runs rustyline: one readline per prompt received, its result sent back.
fn editor_thread(
    asks: std_mpsc::Receiver<String>,
    lines: mpsc::UnboundedSender<Input>,
    printer_tx: std_mpsc::Sender<Option<Box<dyn ExternalPrinter + Send>>>,
) {
    let config = Config::builder()
        .auto_add_history(false)
        .max_history_size(1000)
        .map(|b| b.build())
        .unwrap_or_default();
    let mut editor = match DefaultEditor::with_config(config) {
        Ok(editor) => editor,
        Err(_) => {
            let _ = printer_tx.send(None);
            return;
        }
    };
    let printer = editor
        .create_external_printer()
        .ok()
        .map(|p| Box::new(p) as Box<dyn ExternalPrinter + Send>);
    let _ = printer_tx.send(printer);
    let history = history_path();
    if let Some(path) = &history {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = editor.load_history(path);
    }
    for prompt in asks {
        let input = match editor.readline(&prompt) {
            Ok(line) => {
                let trimmed = line.trim();
                if !trimmed.is_empty() && trimmed != "!!" {
                    let _ = editor.add_history_entry(trimmed);
                    if let Some(path) = &history {
                        let _ = editor.append_history(path);
                    }
                }
                Input::Line(line)
            }
            Err(ReadlineError::Interrupted) => Input::Interrupted,
            Err(_) => Input::Eof,
        };
        if lines.send(input).is_err() {
            break;
        }
    }
}

/// What a typed line asks for.
#[derive(Debug)]
enum Action {
    Send(Command),
    PauseProgram,
    List,
    Switch(String),
    Help,
    Exit,
}

/// Parses a typed line (aliases or `stepctl input` words).
fn parse_line(line: &str) -> Result<Action, String> {
    let (word, rest) = match line.split_once(char::is_whitespace) {
        Some((word, rest)) => (word, rest.trim()),
        None => (line, ""),
    };
    let arg = (!rest.is_empty()).then(|| rest.to_owned());
    let no_arg = |action: Action| match &arg {
        Some(_) => Err(format!("{word} takes no argument")),
        None => Ok(action),
    };
    match word {
        "?" | "help" => return no_arg(Action::Help),
        "exit" => return no_arg(Action::Exit),
        "l" | "list" | "pauses" => return no_arg(Action::List),
        "p" | "pause" => return no_arg(Action::PauseProgram),
        "sw" | "switch" => {
            return arg
                .map(Action::Switch)
                .ok_or_else(|| "sw needs a pause KEY (or its number in `l`)".into());
        }
        _ => {}
    }
    let full = match word {
        "n" => "next",
        "i" | "s" | "step" => "in",
        "o" => "out",
        "o!" => "out!",
        "c" | "cont" => "continue",
        "cs" => "continue-scope",
        "ca" => "continue-all",
        "h" => "here",
        "h!" => "here!",
        "t" => "trace",
        "e" | "eval" => "eval",
        "inj" => "inject",
        "bt" | "where" => "stacktrace",
        "q" => "quit",
        other => other,
    };
    debug_command(full, arg, false)
        .map(Action::Send)
        .map_err(|failure| match failure {
            Failure::Usage(message) => format!("{message} (? lists the commands)"),
            other => format!("{other:?}"),
        })
}

const HELP: &str = "\
commands:
  n                 next: step over
  i                 in: step into the call
  o, o!             out: step out (o! also skips breakpoints on the way)
  c                 continue to the next breakpoint
  cs                continue-scope: ignore breakpoints until this frame returns
  ca                continue-all: breakpoints off until the next pause request
  h [FILE:]LINE     here: run to a line (h! also skips breakpoints)
  t [N]             trace: step on, reporting each line, at most N steps
  e EXPR            eval in the paused frame; `e` alone asks for the expression
  inj NAME = EXPR   inject: assign in the paused frame, then continue
  bt                stacktrace
  q                 quit: terminate the debuggee
  p                 pause the running program
  l                 list the pending pauses; sw KEY|N switches to one
  !!                repeat the last command
  ?, help           this help
  exit              leave stepctl (the session goes on)
`stepctl input` words work too (next, continue-all, inspect, …).";

/// The alias typed for a command kind, as offered at a pause.
fn alias(kind: i32) -> String {
    match CommandKind::try_from(kind) {
        Ok(CommandKind::Next) => "n".into(),
        Ok(CommandKind::In) => "i".into(),
        Ok(CommandKind::Out) => "o/o!".into(),
        Ok(CommandKind::Here) => "h/h!".into(),
        Ok(CommandKind::Continue) => "c".into(),
        Ok(CommandKind::ContinueScope) => "cs".into(),
        Ok(CommandKind::ContinueAll) => "ca".into(),
        Ok(CommandKind::Trace) => "t".into(),
        Ok(CommandKind::Eval) => "e".into(),
        Ok(CommandKind::Inject) => "inj".into(),
        Ok(CommandKind::Stacktrace) => "bt".into(),
        Ok(CommandKind::Quit) => "q".into(),
        Ok(CommandKind::Expression) => "(type the expression)".into(),
        _ => command_word(kind),
    }
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
    waiting: bool,
    /// Pauses with an evaluation of ours in flight (their value is shown even
    /// when unchanged).
    evals: HashSet<String>,
    last_line: Option<String>,
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
            || (!self.waiting && (!self.pending.is_empty() || self.expression_for.is_some()))
    }

    async fn run(&mut self, events: &mut Streaming<SubscribeResponse>) -> String {
        loop {
            if !self.terminal.asked && self.ready_for_input() {
                let prompt = self.prompt();
                self.terminal.ask(&prompt);
            }
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
            };
            if let Flow::End(last) = flow {
                return last;
            }
        }
    }

    fn on_event(&mut self, event: Event) -> Flow {
        if event.seq != 0 {
            if event.seq <= self.stream.cursor {
                return Flow::Go;
            }
            self.stream.cursor = event.seq;
        }
        let ours = event.session_id == self.session_id;
        match event.payload {
            Some(Payload::Snapshot(part)) => {
                let Some(snapshot) = merge_part(&mut self.snapshot_parts, part) else {
                    return Flow::Go;
                };
                self.stream.cursor = snapshot.seq;
                if let Some(session) = snapshot.sessions.iter().find(|s| s.id == self.session_id)
                    && session.state == SessionState::Ended as i32
                {
                    return self.ended(session.end_reason, session.exit_code, &session.signal, "");
                }
                let pauses: Vec<Pause> = snapshot
                    .pauses
                    .into_iter()
                    .filter(|p| p.session_id == self.session_id)
                    .collect();
                // What is no longer pending was resolved meanwhile.
                let keys: HashSet<&str> = pauses.iter().map(|p| p.key.as_str()).collect();
                self.pending.retain(|p| keys.contains(p.key.as_str()));
                for pause in pauses {
                    self.on_pause(pause);
                }
                self.fix_current();
            }
            Some(Payload::Stopped(stopped)) if ours => {
                if let Some(pause) = stopped.pause {
                    self.waiting = false;
                    self.on_pause(pause);
                }
            }
            Some(Payload::PauseResolved(resolved)) if ours => {
                let was_current = self.current.as_deref() == Some(resolved.key.as_str());
                self.pending.retain(|p| p.key != resolved.key);
                self.evals.remove(&resolved.key);
                if self.expression_for.as_deref() == Some(resolved.key.as_str()) {
                    self.expression_for = None;
                }
                if resolved.by != CLIENT_NAME {
                    let text = if resolved.command == CommandKind::Unspecified as i32 {
                        format!("pause {} dropped ({})", resolved.key, resolved.by)
                    } else {
                        format!(
                            "pause {} answered by {}: {}",
                            resolved.key,
                            resolved.by,
                            command_word(resolved.command)
                        )
                    };
                    self.print(text);
                }
                if was_current {
                    self.current = None;
                    self.fix_current();
                    if let Some(pause) = self.current_pause() {
                        let text = format!(
                            "commands now go to pause {} (thread {}, {})",
                            pause.key,
                            pause.thread_id,
                            pause.location.as_ref().map(where_text).unwrap_or_default()
                        );
                        self.print(text);
                    }
                }
            }
            Some(Payload::SessionEnded(end)) if ours => {
                return self.ended(end.reason, end.exit_code, &end.signal, &end.detail);
            }
            Some(Payload::Output(output)) if ours => {
                if let Some(chunk) = output.chunk
                    && chunk.category != "telemetry"
                {
                    let text = chunk.text.trim_end_matches('\n');
                    if !text.is_empty() {
                        self.print(text.to_owned());
                    }
                }
            }
            Some(Payload::Trace(trace)) if ours => {
                let mut line = format!(
                    "trace {}: {}",
                    trace.step,
                    trace.location.as_ref().map(where_text).unwrap_or_default()
                );
                if let Some(value) = &trace.value {
                    line.push_str(&format!(" = {}", display(value)));
                }
                let changed: Vec<String> = trace
                    .changed_locals
                    .iter()
                    .map(|l| {
                        format!(
                            "{}={}",
                            l.name,
                            l.value.as_ref().map(display).unwrap_or_default()
                        )
                    })
                    .collect();
                if !changed.is_empty() {
                    line.push_str(&format!("  [{}]", changed.join(", ")));
                }
                self.print(line);
            }
            Some(Payload::Stack(stack)) if ours => {
                let mut lines = vec![format!("stack of pause {}:", stack.key)];
                for (i, frame) in stack.frames.iter().enumerate() {
                    let place = match &frame.location {
                        Some(location) if !location.path.is_empty() || location.line > 0 => {
                            let mut location = location.clone();
                            if location.function.is_empty() {
                                location.function = frame.name.clone();
                            }
                            where_text(&location)
                        }
                        _ => format!("{} (no source)", frame.name),
                    };
                    lines.push(format!("  #{i} {place}"));
                }
                if !stack.causes.is_empty() {
                    lines.push("causes:".into());
                    for cause in &stack.causes {
                        let at = cause
                            .location
                            .as_ref()
                            .map(|l| format!(" at {}", where_text(l)))
                            .unwrap_or_default();
                        lines.push(format!("  {}: {}{at}", cause.r#type, cause.message));
                    }
                }
                self.say(lines);
            }
            Some(Payload::EvalError(error)) if ours => {
                self.waiting = false;
                self.evals.remove(&error.key);
                let mut lines = vec![format!(
                    "error: {} (pause {} stays)",
                    error.message.trim_end(),
                    error.key
                )];
                for cause in &error.causes {
                    lines.push(format!("  {}: {}", cause.r#type, cause.message));
                }
                self.say(lines);
            }
            Some(Payload::Notification(note)) if ours || event.session_id.is_empty() => {
                let level = match NotificationLevel::try_from(note.level) {
                    Ok(NotificationLevel::Warning) => "warning",
                    Ok(NotificationLevel::Error) => "error",
                    _ => "notice",
                };
                self.print(format!("{level}: {}", note.message));
            }
            Some(Payload::Error(error)) => {
                self.waiting = false;
                let reason = error
                    .reason()
                    .as_str_name()
                    .trim_start_matches("ERROR_REASON_");
                let about = if error.key.is_empty() {
                    String::new()
                } else {
                    format!(" (pause {})", error.key)
                };
                if self.expression_for.as_deref() == Some(error.key.as_str()) {
                    self.expression_for = None;
                }
                self.print(format!("error {reason}: {}{about}", error.message));
            }
            Some(Payload::Gap(gap)) => {
                self.print(format!(
                    "events {}..{} were lost ({}); catching up",
                    gap.from_seq, gap.to_seq, gap.reason
                ));
            }
            _ => {}
        }
        Flow::Go
    }

    fn ended(&mut self, reason: i32, exit_code: Option<i32>, signal: &str, detail: &str) -> Flow {
        let mut text = format!(
            "session {} ended: {}",
            self.session_id,
            end_text(reason, exit_code, signal)
        );
        if !detail.is_empty() && reason != EndReason::Exited as i32 {
            text.push_str(&format!(" ({detail})"));
        }
        Flow::End(text)
    }

    /// Makes a pending pause current when none is.
    fn fix_current(&mut self) {
        let valid = self
            .current
            .as_ref()
            .is_some_and(|k| self.pending.iter().any(|p| &p.key == k));
        if !valid {
            self.current = self.pending.last().map(|p| p.key.clone());
        }
    }

    /// A stopped pause: new ones in full, re-sent ones by what changed.
    fn on_pause(&mut self, pause: Pause) {
        let Some(index) = self.pending.iter().position(|p| p.key == pause.key) else {
            let mut lines = pause_text(&pause);
            let others = self.current.clone().filter(|k| *k != pause.key);
            self.pending.push(pause.clone());
            match others {
                Some(current) if self.pending.iter().any(|p| p.key == current) => {
                    lines.push(format!(
                        "({} pauses pending; commands still go to {current}: l lists, sw {} switches)",
                        self.pending.len(),
                        pause.key
                    ));
                }
                _ => self.current = Some(pause.key.clone()),
            }
            self.say(lines);
            return;
        };
        let before = &self.pending[index];
        if pause.revision <= before.revision {
            return;
        }
        let mut lines = Vec::new();
        if expects_expression(&pause) {
            if !expects_expression(before) {
                lines.push(format!(
                    "{}:",
                    if pause.prompt.is_empty() {
                        "expression"
                    } else {
                        pause.prompt.as_str()
                    }
                ));
            }
        } else {
            let ours = self.evals.remove(&pause.key);
            if let Some(value) = &pause.debug_value
                && (ours || before.debug_value.as_ref() != Some(value))
            {
                lines.push(format!("= {}", display(value)));
            }
            if pause.inspect.is_some() && pause.inspect != before.inspect {
                lines.extend(pause_details(&pause));
            } else if pause.notes != before.notes {
                lines.extend(pause.notes.iter().map(|n| format!("note: {n}")));
            }
        }
        self.pending[index] = pause;
        self.say(lines);
    }

    async fn on_line(&mut self, line: &str) -> Flow {
        let mut line = line.trim().to_owned();
        if line.is_empty() {
            return Flow::Go;
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
        match parse_line(&line) {
            Err(message) => {
                self.print(message);
                Flow::Go
            }
            Ok(Action::Help) => {
                let mut text = HELP.to_owned();
                match self.current_pause() {
                    Some(pause) => {
                        let offered: Vec<String> =
                            pause.input_type.iter().map(|k| alias(*k)).collect();
                        text.push_str(&format!(
                            "\noffered at pause {}: {}",
                            pause.key,
                            offered.join(" ")
                        ));
                    }
                    None => {
                        text.push_str("\nno pause pending: the program is running (p pauses it)")
                    }
                }
                self.print(text);
                Flow::Go
            }
            Ok(Action::Exit) => {
                Flow::End(format!("leaving; the session {} goes on", self.session_id))
            }
            Ok(Action::List) => {
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
                                p.location.as_ref().map(where_text).unwrap_or_default(),
                                commands_text(&p.input_type)
                            )
                        })
                        .collect()
                };
                self.say(lines);
                Flow::Go
            }
            Ok(Action::Switch(which)) => {
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
                        let mut lines = vec![format!("commands now go to pause {}", pause.key)];
                        lines.extend(pause_text(&pause));
                        self.say(lines);
                    }
                    None => self.print(format!("no pending pause {which} (l lists them)")),
                }
                Flow::Go
            }
            Ok(Action::PauseProgram) => {
                self.waiting = true;
                let result = client!(SessionServiceClient, self.channel.clone())
                    .pause(PauseRequest {
                        session_id: self.session_id.clone(),
                        thread_id: 0,
                        wait: Some(pause_request::Wait::NoWait(NoWait {})),
                    })
                    .await;
                if let Err(status) = result {
                    self.waiting = false;
                    self.print(format!("pause failed: {}", status.message()));
                }
                Flow::Go
            }
            Ok(Action::Send(command)) => {
                let Some(key) = self
                    .current
                    .clone()
                    .filter(|_| self.current_pause().is_some())
                else {
                    self.print("no pause pending: the program is running (p pauses it)".into());
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
        }
    }

    async fn answer(&mut self, key: String, command: Command) -> Flow {
        self.waiting = true;
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

/// A new pause in full: what stopped, where, the code, locals, value.
fn pause_text(pause: &Pause) -> Vec<String> {
    let mut header = format!(
        "stopped: {} on thread {}",
        reason_text(pause.reason),
        pause.thread_id
    );
    if !pause.breakpoint_ids.is_empty() {
        header.push_str(&format!(" at {}", pause.breakpoint_ids.join(", ")));
    }
    let mut lines = vec![header];
    if let Some(location) = &pause.location {
        lines.extend(location_lines(location));
    }
    lines.extend(pause_details(pause));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use stepd_proto::v1::{HereCommand, StepOutCommand, TraceCommand};

    #[test]
    fn aliases_parse() {
        assert!(matches!(
            parse_line("n"),
            Ok(Action::Send(Command::Next(_)))
        ));
        assert!(matches!(
            parse_line("o!"),
            Ok(Action::Send(Command::StepOut(StepOutCommand {
                force: true
            })))
        ));
        assert!(matches!(
            parse_line("h! 12"),
            Ok(Action::Send(Command::Here(HereCommand {
                line: 12,
                force: true,
                ..
            })))
        ));
        assert!(matches!(
            parse_line("h @0,2"),
            Ok(Action::Send(Command::Here(HereCommand { ref coor, force: false, .. }))) if *coor == [0, 2]
        ));
        assert!(matches!(
            parse_line("t 5"),
            Ok(Action::Send(Command::Trace(TraceCommand { max_steps: 5 })))
        ));
        assert!(matches!(
            parse_line("e items[1] + 100"),
            Ok(Action::Send(Command::Eval(e))) if e.code == "items[1] + 100"
        ));
        assert!(matches!(
            parse_line("e"),
            Ok(Action::Send(Command::Eval(e))) if e.code.is_empty()
        ));
        assert!(matches!(
            parse_line("inj total = 1000"),
            Ok(Action::Send(Command::Inject(_)))
        ));
        assert!(matches!(parse_line("sw 2"), Ok(Action::Switch(k)) if k == "2"));
        assert!(matches!(parse_line("p"), Ok(Action::PauseProgram)));
        assert!(matches!(parse_line("exit"), Ok(Action::Exit)));
        assert!(parse_line("n 3").is_err());
        assert!(parse_line("sw").is_err());
        assert!(parse_line("jump").is_err());
        assert_eq!(alias(CommandKind::ContinueAll as i32), "ca");
    }
}
