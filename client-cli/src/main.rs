//! `stepctl`: the command line client of stepd. Every subcommand is one or a
//! few RPCs; `--json` prints the protobuf JSON mapping.

mod cmd;
mod connect;
mod exit;
mod render;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::{
    cmd::{breakpoints::BreakCommand, watch::WatchArgs},
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
    #[arg(long, env = "STEPD_ADDR", global = true)]
    addr: Option<String>,
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
    /// Check debug adapters, the store and the configuration.
    Doctor,
    /// Show stepctl's and the daemon's versions.
    Version,
    /// Stop the daemon gracefully.
    Shutdown,
    /// Manage breakpoints.
    #[command(subcommand)]
    Break(BreakCommand),
    /// Stream events as they happen.
    Watch(WatchArgs),
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let channel = connect::channel(cli.addr.as_deref()).await?;
    let json = cli.json;
    match cli.command {
        Command::Ping => cmd::daemon::ping(channel, json).await,
        Command::Status => cmd::daemon::status(channel, json).await,
        Command::Doctor => cmd::daemon::doctor(channel, json).await,
        Command::Version => cmd::daemon::version(channel, json).await,
        Command::Shutdown => cmd::daemon::shutdown(channel, json).await,
        Command::Break(command) => cmd::breakpoints::run(channel, command, json).await,
        Command::Watch(args) => cmd::watch::run(channel, args, json).await,
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(json),
    }
}
