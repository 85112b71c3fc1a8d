//! `launch`, `attach`, `disconnect`, `sessions`, `continue`, `step` and
//! `pause`: starting, listing and driving debug sessions.

use crate::connect::client;
use std::{
    collections::{BTreeMap, HashMap},
    path::Path,
    time::Duration,
};

use clap::{Args, ValueEnum};
use stepd_proto::v1::{
    AttachRequest, AttachResponse, ContinueRequest, DisconnectMode, DisconnectRequest,
    LaunchRequest, ListSessionsRequest, NoWait, PauseRequest, StableState, StepKind, StepRequest,
    Wait, continue_request, pause_request, session_service_client::SessionServiceClient,
    step_request,
};

use crate::connect::Channel;

use crate::{
    caller,
    exit::Failure,
    render::{
        self,
        pauses::stable_text,
        print_json,
        sessions::{dash, labels_text, placements, session_line, state_text},
    },
};

/// Client name shown in `pause_resolved.by` when stepctl answers a pause.
pub const CLIENT_NAME: &str = "stepctl";

/// A path made absolute against stepctl's working directory (as `break add` does).
pub fn absolute(path: &str) -> String {
    if path.is_empty() || Path::new(path).is_absolute() {
        return path.to_owned();
    }
    std::env::current_dir()
        .map(|cwd| cwd.join(path).display().to_string())
        .unwrap_or_else(|_| path.to_owned())
}

/// Parses repeated `K=V` arguments.
fn pairs(flag: &str, values: Vec<String>) -> Result<BTreeMap<String, String>, Failure> {
    values
        .into_iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
            _ => Err(Failure::Usage(format!("{flag} {kv:?} is not KEY=VALUE"))),
        })
        .collect()
}

/// `--adapter-command` words: one per occurrence, or one occurrence holding
/// the whole command line separated by spaces.
fn adapter_command(words: Vec<String>) -> Vec<String> {
    if let [single] = words.as_slice() {
        single.split_whitespace().map(str::to_owned).collect()
    } else {
        words
    }
}

/// The adapter names stepd knows, offered by shell completion; any name is
/// accepted, so the daemon's answer stays the one that refuses.
#[derive(Clone)]
struct AdapterName;

impl clap::builder::TypedValueParser for AdapterName {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            ["debugpy", "lldb", "dlv", "gdb", "custom"]
                .into_iter()
                .map(clap::builder::PossibleValue::new),
        ))
    }
}

/// Arguments shared by `launch` and `attach`: which adapter, labels, name.
#[derive(Debug, Args)]
pub struct AdapterArgs {
    /// Debug adapter: debugpy, lldb, dlv, gdb (or custom with --adapter-command).
    /// Without it the daemon guesses from the program.
    #[arg(long, value_parser = AdapterName)]
    pub adapter: Option<String>,
    /// Adapter command line: one word per occurrence (repeat it), or a single
    /// occurrence with the words separated by spaces, e.g. "lldb-dap-19".
    #[arg(long, value_name = "CMD", allow_hyphen_values = true)]
    pub adapter_command: Vec<String>,
    /// Session label KEY=VALUE (repeatable); breakpoints select sessions by labels.
    #[arg(long = "label", value_name = "K=V")]
    pub labels: Vec<String>,
    /// Display name of the session.
    #[arg(long)]
    pub name: Option<String>,
    /// Keep stepping and breakpoints to the program's own code (debugpy's
    /// default); --just-my-code=false lets breakpoints in libraries stop and
    /// steps go into them (for lldb: into code without debug information).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub just_my_code: Option<bool>,
}

/// Arguments of `launch`.
#[derive(Debug, Args)]
pub struct LaunchArgs {
    /// Program to debug; a relative path is made absolute. Program arguments
    /// that start with '-' go after `--`.
    pub program: String,
    /// Arguments passed to the program.
    pub args: Vec<String>,
    #[command(flatten)]
    pub adapter: AdapterArgs,
    /// Working directory of the program (default: this shell's when the
    /// daemon runs here as you, else the daemon's).
    #[arg(long)]
    pub cwd: Option<String>,
    /// Environment variable KEY=VALUE for the program (repeatable), on top
    /// of this shell's environment when the daemon runs here as you, else
    /// of the daemon's.
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
    /// Stop before the first line of user code; the entry stop is printed.
    #[arg(long)]
    pub stop_on_entry: bool,
    #[command(flatten)]
    pub context: ContextArgs,
}

/// Whose context a launch runs in, and a Python program's interpreter.
#[derive(Debug, Args, Default)]
pub struct ContextArgs {
    /// The Python interpreter that runs the program (default: the active
    /// virtualenv, or a .venv beside the program, when the daemon runs here).
    #[arg(long, value_name = "PATH")]
    pub python: Option<String>,
    /// Run in the daemon's working directory and environment (and look for
    /// the adapter on its PATH) rather than this shell's.
    #[arg(long)]
    pub daemon_context: bool,
    /// This shell's context, when the daemon runs here as the same user.
    #[arg(skip)]
    pub caller: Option<crate::caller::Caller>,
}

/// Arguments of `attach`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "connect"])))]
pub struct AttachArgs {
    /// Process id to attach to.
    #[arg(long)]
    pub pid: Option<i64>,
    /// Debug server to connect to, HOST:PORT (e.g. a debugpy listener).
    #[arg(long, value_name = "HOST:PORT")]
    pub connect: Option<String>,
    #[command(flatten)]
    pub adapter: AdapterArgs,
}

/// Arguments of `disconnect`.
#[derive(Debug, Args)]
pub struct DisconnectArgs {
    /// The session.
    pub session: String,
    /// Kill the debuggee (the default for launched programs).
    #[arg(long, conflicts_with = "detach")]
    pub terminate: bool,
    /// Leave the debuggee running (the default for attached ones).
    #[arg(long)]
    pub detach: bool,
}

/// Arguments of `sessions`.
#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// Include ended sessions the daemon still remembers.
    #[arg(long, conflicts_with = "ended")]
    pub all: bool,
    /// List sessions that ended, every replica's, from the store (newest first).
    #[arg(long)]
    pub ended: bool,
    /// Only sessions whose labels match this selector, e.g. 'env=dev,team in (a,b)'.
    #[arg(long, value_name = "SELECTOR")]
    pub labels: Option<String>,
    /// With --ended: only sessions that ended at or after this time (RFC 3339, or a duration back from now: 2h).
    #[arg(long, value_name = "TIME", requires = "ended")]
    pub since: Option<String>,
    /// With --ended: only sessions that started at or before this time (RFC 3339, or a duration back from now).
    #[arg(long, value_name = "TIME", requires = "ended")]
    pub until: Option<String>,
    /// With --ended: one page of at most N sessions, and the token of the next.
    #[arg(long, value_name = "N", requires = "ended")]
    pub limit: Option<u32>,
    /// With --ended: go on from a page's token.
    #[arg(long, value_name = "TOKEN", requires = "ended")]
    pub page_token: Option<String>,
}

/// How long an execution command waits, as given to `--wait`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitFor {
    /// `--wait` alone: the daemon's default (30 s).
    Default,
    /// `--wait DURATION`; 0 = forever.
    Millis(u32),
}

fn parse_wait(text: &str) -> Result<WaitFor, String> {
    if text.is_empty() {
        return Ok(WaitFor::Default);
    }
    let duration = if let Ok(secs) = text.parse::<u64>() {
        Duration::from_secs(secs)
    } else {
        humantime::parse_duration(text)
            .map_err(|e| format!("{e} (give e.g. 5s, 500ms, 2m, or 0 for no limit)"))?
    };
    u32::try_from(duration.as_millis())
        .map(WaitFor::Millis)
        .map_err(|_| "too long; use 0 to wait without a limit".to_owned())
}

/// `--wait` / `--no-wait` of the execution commands.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Wait until the session is stable again (stopped or ended). This is the
    /// default, with the daemon's 30 s limit; `--wait 5s` sets the limit,
    /// `--wait 0` waits without one. A plain number is seconds.
    #[arg(
        long,
        value_name = "DURATION",
        num_args = 0..=1,
        default_missing_value = "",
        value_parser = parse_wait
    )]
    pub wait: Option<WaitFor>,
    /// Answer as soon as the daemon accepted the request.
    #[arg(long, conflicts_with = "wait")]
    pub no_wait: bool,
}

/// What the request's `wait` oneof should hold.
enum WaitMode {
    /// Unset: the RPC's default (wait, 30 s).
    Default,
    /// NoWait.
    NoWait,
    /// Wait with this limit.
    Until(Wait),
}

impl WaitArgs {
    fn mode(&self) -> WaitMode {
        match (self.no_wait, self.wait) {
            (true, _) => WaitMode::NoWait,
            (false, None) | (false, Some(WaitFor::Default)) => WaitMode::Default,
            (false, Some(WaitFor::Millis(ms))) => WaitMode::Until(Wait {
                timeout_ms: Some(ms),
            }),
        }
    }
}

/// Arguments of `continue` and `pause`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The session.
    pub session: String,
    /// Only this thread (default: all threads).
    #[arg(long, value_name = "N")]
    pub thread: Option<i64>,
    #[command(flatten)]
    pub wait: WaitArgs,
}

/// Which step.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StepWhich {
    /// Step over the current line.
    Over,
    /// Step into the call on the current line.
    In,
    /// Run until the current function returns.
    Out,
}

/// Arguments of `step`.
#[derive(Debug, Args)]
pub struct StepArgs {
    /// over, in or out.
    pub kind: StepWhich,
    /// The session.
    pub session: String,
    /// Thread to step (default: the thread of the latest pause).
    #[arg(long, value_name = "N")]
    pub thread: Option<i64>,
    #[command(flatten)]
    pub wait: WaitArgs,
}

pub(crate) fn sessions_client(channel: Channel) -> SessionServiceClient<Channel> {
    client!(SessionServiceClient, channel)
}

/// The LaunchRequest of `launch` (and `debug --launch`).
pub fn launch_request(args: LaunchArgs) -> Result<(LaunchRequest, Option<String>), Failure> {
    let program = absolute(&args.program);
    let adapter = args.adapter.adapter.unwrap_or_default();
    let caller = args.context.caller.filter(|_| !args.context.daemon_context);
    let python = (!adapter.is_empty()).then_some(adapter.as_str());
    let interpreter = if caller::is_python(python, &program) {
        caller::interpreter(
            args.context.python.as_deref(),
            &program,
            caller.as_ref().map(|c| &c.env),
        )
    } else if args.context.python.is_some() {
        return Err(Failure::Usage(
            "--python is for Python programs (adapter debugpy, or a .py program)".into(),
        ));
    } else {
        None
    };
    let adapter_options = interpreter.as_ref().map(|(path, _)| prost_types::Struct {
        fields: [(
            "python".to_owned(),
            prost_types::Value {
                kind: Some(prost_types::value::Kind::StringValue(path.clone())),
            },
        )]
        .into(),
    });
    let mut env: HashMap<String, String> =
        caller.as_ref().map(|c| c.env.clone()).unwrap_or_default();
    env.extend(pairs("--env", args.env)?);
    let cwd = match (args.cwd, &caller) {
        (Some(cwd), _) => absolute(&cwd),
        (None, Some(caller)) => caller.cwd.clone(),
        (None, None) => String::new(),
    };
    let request = LaunchRequest {
        adapter,
        adapter_command: adapter_command(args.adapter.adapter_command),
        program,
        args: args.args,
        cwd,
        env,
        stop_on_entry: args.stop_on_entry,
        labels: pairs("--label", args.adapter.labels)?.into_iter().collect(),
        name: args.adapter.name.unwrap_or_default(),
        adapter_options,
        just_my_code: args.adapter.just_my_code,
        ..Default::default()
    };
    let note = interpreter.map(|(path, why)| format!("python: {path} (from {why})"));
    Ok((request, note))
}

/// `stepctl launch`.
pub async fn launch(channel: Channel, args: LaunchArgs, json: bool) -> Result<(), Failure> {
    let (request, note) = launch_request(args)?;
    if let Some(note) = &note {
        // Said before the launch, so it is there whatever the launch answers.
        if json {
            eprintln!("{note}");
        } else {
            println!("{note}");
        }
    }
    let r = sessions_client(channel).launch(request).await?.into_inner();
    if json {
        print_json(&r);
        return Ok(());
    }
    let session = r.session.unwrap_or_default();
    println!("{}", session_line("launched", &session));
    if !r.breakpoints.is_empty() {
        println!("{}", placements(&r.breakpoints));
    }
    if let Some(entry) = &r.entry {
        println!("entry stop:");
        println!("{}", stable_text(entry));
    }
    Ok(())
}

/// `stepctl attach`.
pub async fn attach(channel: Channel, args: AttachArgs, json: bool) -> Result<(), Failure> {
    let request = AttachRequest {
        adapter: args.adapter.adapter.unwrap_or_default(),
        adapter_command: adapter_command(args.adapter.adapter_command),
        pid: args.pid.unwrap_or(0),
        connect: args.connect.unwrap_or_default(),
        labels: pairs("--label", args.adapter.labels)?.into_iter().collect(),
        name: args.adapter.name.unwrap_or_default(),
        just_my_code: args.adapter.just_my_code,
        ..Default::default()
    };
    let r: AttachResponse = sessions_client(channel).attach(request).await?.into_inner();
    if json {
        print_json(&r);
        return Ok(());
    }
    let session = r.session.unwrap_or_default();
    println!("{}", session_line("attached", &session));
    if !r.breakpoints.is_empty() {
        println!("{}", placements(&r.breakpoints));
    }
    Ok(())
}

/// `stepctl disconnect`.
pub async fn disconnect(channel: Channel, args: DisconnectArgs, json: bool) -> Result<(), Failure> {
    let mode = if args.terminate {
        DisconnectMode::Terminate
    } else if args.detach {
        DisconnectMode::Detach
    } else {
        DisconnectMode::Unspecified
    };
    let session = sessions_client(channel)
        .disconnect(DisconnectRequest {
            session_id: args.session,
            mode: mode.into(),
        })
        .await?
        .into_inner()
        .session
        .unwrap_or_default();
    if json {
        print_json(&session);
    } else {
        println!("session {} {}", session.id, state_text(&session));
    }
    Ok(())
}

/// `stepctl sessions`.
pub async fn list(channel: Channel, args: SessionsArgs, json: bool) -> Result<(), Failure> {
    if args.ended {
        let query = super::ended::Query {
            labels: args.labels,
            since: args.since,
            until: args.until,
            limit: args.limit,
            page_token: args.page_token,
        };
        return super::ended::list(channel, query, json).await;
    }
    // Every page, so the listing is whole however large it is.
    let mut client = sessions_client(channel);
    let mut request = ListSessionsRequest {
        include_ended: args.all,
        label_selector: args.labels.unwrap_or_default(),
        ..Default::default()
    };
    let mut r = stepd_proto::v1::ListSessionsResponse::default();
    loop {
        let page = client.list_sessions(request.clone()).await?.into_inner();
        r.sessions.extend(page.sessions);
        if page.next_page_token.is_empty() {
            break;
        }
        request.page_token = page.next_page_token;
    }
    if json {
        print_json(&r);
    } else if r.sessions.is_empty() {
        println!("no sessions");
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
                    if s.pid > 0 {
                        s.pid.to_string()
                    } else {
                        "-".into()
                    },
                    labels_text(&s.labels),
                ]
            })
            .collect();
        println!(
            "{}",
            render::table(&["ID", "NAME", "ADAPTER", "STATE", "PID", "LABELS"], &rows)
        );
    }
    Ok(())
}

/// `stepctl continue`.
pub async fn resume(channel: Channel, args: ExecArgs, json: bool) -> Result<(), Failure> {
    use continue_request::Wait as W;
    let wait = match args.wait.mode() {
        WaitMode::Default => None,
        WaitMode::NoWait => Some(W::NoWait(NoWait {})),
        WaitMode::Until(w) => Some(W::UntilStable(w)),
    };
    let state = sessions_client(channel)
        .r#continue(ContinueRequest {
            session_id: args.session,
            thread_id: args.thread.unwrap_or(0),
            wait,
        })
        .await?
        .into_inner()
        .state
        .unwrap_or_default();
    print_stable(&state, json)
}

/// `stepctl step over|in|out`.
pub async fn step(channel: Channel, args: StepArgs, json: bool) -> Result<(), Failure> {
    use step_request::Wait as W;
    let wait = match args.wait.mode() {
        WaitMode::Default => None,
        WaitMode::NoWait => Some(W::NoWait(NoWait {})),
        WaitMode::Until(w) => Some(W::UntilStable(w)),
    };
    let kind = match args.kind {
        StepWhich::Over => StepKind::Over,
        StepWhich::In => StepKind::In,
        StepWhich::Out => StepKind::Out,
    };
    let state = sessions_client(channel)
        .step(StepRequest {
            session_id: args.session,
            thread_id: args.thread.unwrap_or(0),
            kind: kind.into(),
            wait,
        })
        .await?
        .into_inner()
        .state
        .unwrap_or_default();
    print_stable(&state, json)
}

/// `stepctl pause`.
pub async fn pause(channel: Channel, args: ExecArgs, json: bool) -> Result<(), Failure> {
    use pause_request::Wait as W;
    let wait = match args.wait.mode() {
        WaitMode::Default => None,
        WaitMode::NoWait => Some(W::NoWait(NoWait {})),
        WaitMode::Until(w) => Some(W::UntilStable(w)),
    };
    let state = sessions_client(channel)
        .pause(PauseRequest {
            session_id: args.session,
            thread_id: args.thread.unwrap_or(0),
            wait,
        })
        .await?
        .into_inner()
        .state
        .unwrap_or_default();
    print_stable(&state, json)
}

/// Prints where an execution request left the session; a wait that ran
/// out fails with its own exit code, so scripts tell it from a stop.
fn print_stable(state: &StableState, json: bool) -> Result<(), Failure> {
    if json {
        print_json(state);
    } else {
        println!("{}", stable_text(state));
    }
    if state.waited && state.timed_out {
        return Err(Failure::TimedOut(format!(
            "timed out after {} ms waiting for the session to stop or end",
            state.elapsed_ms
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_durations() {
        assert_eq!(parse_wait(""), Ok(WaitFor::Default));
        assert_eq!(parse_wait("0"), Ok(WaitFor::Millis(0)));
        assert_eq!(parse_wait("5s"), Ok(WaitFor::Millis(5000)));
        assert_eq!(parse_wait("250ms"), Ok(WaitFor::Millis(250)));
        assert_eq!(parse_wait("2"), Ok(WaitFor::Millis(2000)));
        assert!(parse_wait("soon").is_err());
    }
}
