//! `stepctl`: the command line client of stepd. Every subcommand is one or a
//! few RPCs; `--json` prints the protobuf JSON mapping.

mod caller;
mod cmd;
mod colour;
mod connect;
mod exit;
mod handshake;
mod line_editor;
mod render;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::{
    cmd::{
        breakpoints::BreakCommand,
        debug::DebugArgs,
        inspect::{EvalArgs, OutputArgs, ScopesArgs, SetArgs, StackArgs, ThreadsArgs, VarsArgs},
        pauses::{InputArgs, PausesArgs},
        sessions::{AttachArgs, DisconnectArgs, ExecArgs, LaunchArgs, SessionsArgs, StepArgs},
        watch::WatchArgs,
    },
    exit::Failure,
};

#[derive(Debug, Parser)]
#[command(
    name = "stepctl",
    version,
    about = "Command line client for the stepd debugging daemon",
    after_help = exit::table()
)]
struct Cli {
    /// Daemon address: HOST:PORT or unix:PATH. Without it, 127.0.0.1:7701, and
    /// stepd is started there if it is not running.
    /// HOST:PORT is plaintext unless --tls-ca or --tls-cert is given;
    /// https://HOST:PORT is TLS (the system's roots without --tls-ca).
    #[arg(long, env = "STEPD_ADDR", global = true)]
    addr: Option<String>,
    /// PEM CA certificate(s) that verify the daemon's TLS certificate.
    #[arg(long, env = "STEPD_TLS_CA", global = true)]
    tls_ca: Option<std::path::PathBuf>,
    /// PEM client certificate for mutual TLS (with --tls-key).
    #[arg(long, env = "STEPD_TLS_CERT", global = true)]
    tls_cert: Option<std::path::PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "STEPD_TLS_KEY", global = true)]
    tls_key: Option<std::path::PathBuf>,
    /// Bearer token sent on every call. Without it and without --addr, the
    /// local daemon's <data dir>/token is sent when it exists.
    #[arg(long, env = "STEPD_TOKEN", global = true, hide_env_values = true)]
    token: Option<String>,
    /// Print results in the protobuf JSON mapping (JSON lines for streams).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check that the daemon answers; show its version and uptime.
    Ping,
    /// Show the daemon's counts and addresses.
    Status,
    /// Check debug adapters, the store and the configuration; with --addr,
    /// the TLS handshake too, saying why one fails.
    Doctor,
    /// Show stepctl's and the daemon's versions.
    Version,
    /// Stop the daemon gracefully.
    Shutdown,
    /// Start a program under a debug adapter; show its breakpoints as placed.
    Launch(Box<LaunchArgs>),
    /// Attach a debug adapter to a running process or a debug server.
    Attach(Box<AttachArgs>),
    /// End a session: terminate or detach the debuggee.
    Disconnect(DisconnectArgs),
    /// List sessions (--all includes ended ones).
    Sessions(SessionsArgs),
    /// Resume a session; wait until it stops or ends (--wait / --no-wait).
    Continue(ExecArgs),
    /// Step over, in or out; wait until it stops again (--wait / --no-wait).
    Step(StepArgs),
    /// Interrupt a running session; wait until it stops (--wait / --no-wait).
    Pause(ExecArgs),
    /// List a session's threads.
    Threads(ThreadsArgs),
    /// Show the stack of a stopped thread.
    Stack(StackArgs),
    /// List the scopes of a frame.
    Scopes(ScopesArgs),
    /// List the children of a scope or variable.
    Vars(VarsArgs),
    /// Assign a variable.
    Set(SetArgs),
    /// Evaluate an expression, in a frame or the latest stop's.
    Eval(EvalArgs),
    /// Print a session's output (--follow: until it ends).
    Output(OutputArgs),
    /// List pending pauses.
    Pauses(PausesArgs),
    /// Answer a pause: stepctl input KEY COMMAND [ARG].
    Input(InputArgs),
    /// Manage breakpoints.
    #[command(subcommand)]
    Break(BreakCommand),
    /// Mint a W3C baggage entry that scopes probe breakpoints to your requests.
    #[command(subcommand)]
    Baggage(cmd::baggage::BaggageCommand),
    /// Stream events as they happen.
    Watch(WatchArgs),
    /// Show what a session did, from its recorded history: a timeline of its
    /// pauses, decisions, output and end, also after it ended.
    History(cmd::history::HistoryArgs),
    /// Debug a session interactively: show each pause, answer with gdb/pdb
    /// commands (n, s, c, finish, p, l, b, bt, up, display, ...; ? lists them).
    Debug(Box<DebugArgs>),
    /// Inspect a value page by page on the server: push, pop, pages, siblings, views, analytics, print.
    Inspect(Box<cmd::inspector::InspectArgs>),
    /// Print a shell completion script: `source <(stepctl completion bash)`.
    Completion {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the live sessions' ids and names, for shell completion.
    #[command(name = "complete-sessions", hide = true)]
    CompleteSessions,
    /// Write a man page per command (stepctl.1, stepctl-launch.1, …) into DIR.
    Man {
        /// Directory to write the pages into; created when missing.
        dir: std::path::PathBuf,
    },
}

async fn run(cli: Cli) -> Result<(), Failure> {
    // What needs no daemon is answered before connecting (which may start one).
    match &cli.command {
        Command::Completion { shell } => {
            cmd::completion::script(*shell, Cli::command());
            return Ok(());
        }
        Command::Man { dir } => return cmd::docs::man_pages(Cli::command(), dir),
        _ => {}
    }
    if let Command::Baggage(command) = cli.command {
        return cmd::baggage::run(command, cli.json);
    }
    let options = connect::Options {
        addr: cli.addr,
        tls_ca: cli.tls_ca,
        tls_cert: cli.tls_cert,
        tls_key: cli.tls_key,
        token: cli.token,
        start: true,
    };
    if let Command::CompleteSessions = cli.command {
        return cmd::completion::sessions(&options).await;
    }
    let json = cli.json;
    // doctor connects itself: it tells why a connection fails.
    if let Command::Doctor = cli.command {
        return cmd::daemon::doctor(&options, json).await;
    }
    let channel = connect::channel(&options).await?;
    let mut command = cli.command;
    // A launch runs in this shell's context when the daemon runs here as
    // this user (checked once connected: the daemon may just have started).
    if let Command::Launch(args) = &mut command {
        args.context.caller = caller::local_same_user(&options).then(caller::Caller::here);
    }
    if let Command::Debug(args) = &mut command {
        args.context.caller = caller::local_same_user(&options).then(caller::Caller::here);
    }
    select_sessions(&channel, &mut command).await?;
    match command {
        Command::Ping => cmd::daemon::ping(channel, json).await,
        Command::Status => cmd::daemon::status(channel, json).await,
        Command::Doctor => cmd::daemon::doctor(&options, json).await,
        Command::Version => cmd::daemon::version(channel, json).await,
        Command::Shutdown => cmd::daemon::shutdown(channel, json).await,
        Command::Launch(args) => cmd::sessions::launch(channel, *args, json).await,
        Command::Attach(args) => cmd::sessions::attach(channel, *args, json).await,
        Command::Disconnect(args) => cmd::sessions::disconnect(channel, args, json).await,
        Command::Sessions(args) => cmd::sessions::list(channel, args, json).await,
        Command::Continue(args) => cmd::sessions::resume(channel, args, json).await,
        Command::Step(args) => cmd::sessions::step(channel, args, json).await,
        Command::Pause(args) => cmd::sessions::pause(channel, args, json).await,
        Command::Threads(args) => cmd::inspect::threads(channel, args, json).await,
        Command::Stack(args) => cmd::inspect::stack(channel, args, json).await,
        Command::Scopes(args) => cmd::inspect::scopes(channel, args, json).await,
        Command::Vars(args) => cmd::inspect::vars(channel, args, json).await,
        Command::Set(args) => cmd::inspect::set(channel, args, json).await,
        Command::Eval(args) => cmd::inspect::eval(channel, args, json).await,
        Command::Output(args) => cmd::inspect::output(channel, args, json).await,
        Command::Pauses(args) => cmd::pauses::pauses(channel, args, json).await,
        Command::Input(args) => cmd::pauses::input(channel, args, json).await,
        Command::Break(command) => cmd::breakpoints::run(channel, command, json).await,
        Command::Watch(args) => cmd::watch::run(channel, args, json).await,
        Command::History(args) => cmd::history::run(channel, args, json).await,
        Command::Debug(args) => cmd::debug::run(channel, *args).await,
        Command::Inspect(args) => cmd::inspector::run(channel, *args, json).await,
        Command::Completion { .. }
        | Command::Man { .. }
        | Command::Baggage(_)
        | Command::CompleteSessions => Ok(()),
    }
}

/// Turns the session a command names (an id, a unique id prefix, a name)
/// into its id, for every command that takes one.
async fn select_sessions(channel: &connect::Channel, command: &mut Command) -> Result<(), Failure> {
    use cmd::select::{resolve, resolve_opt};
    match command {
        Command::Disconnect(a) => resolve(channel, &mut a.session).await,
        Command::Continue(a) | Command::Pause(a) => resolve(channel, &mut a.session).await,
        Command::Step(a) => resolve(channel, &mut a.session).await,
        Command::Threads(a) => resolve(channel, &mut a.session).await,
        Command::Stack(a) => resolve(channel, &mut a.session).await,
        Command::Scopes(a) => resolve(channel, &mut a.session).await,
        Command::Vars(a) => resolve(channel, &mut a.session).await,
        Command::Set(a) => resolve(channel, &mut a.session).await,
        Command::Eval(a) => resolve(channel, &mut a.session).await,
        Command::Output(a) => resolve(channel, &mut a.session).await,
        Command::Pauses(a) => resolve_opt(channel, &mut a.session).await,
        Command::History(a) => resolve(channel, &mut a.session).await,
        Command::Inspect(a) => resolve_opt(channel, &mut a.session).await,
        Command::Watch(a) => {
            for session in &mut a.sessions {
                resolve(channel, session).await?;
            }
            Ok(())
        }
        Command::Debug(a) if a.launch.is_none() => match a.rest.first_mut() {
            Some(session) => resolve(channel, session).await,
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // Like other command line tools, end quietly when the reader of our output
    // goes away (`stepctl watch | head`) instead of panicking on EPIPE.
    // SAFETY: restoring the default disposition of a signal has no memory effects.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let json = cli.json;
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(json),
    }
}
