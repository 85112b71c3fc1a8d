//! `stepd`: parse the configuration, start logging, serve. Everything it
//! wires is in the crates below it, `stepd-api` first.

use clap::Parser;
use stepd_api::config::{Cli, Config};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut cli = Cli::parse();
    if let Some(command) = cli.command.take() {
        return stepd_api::auth::cli::run(command);
    }
    let config = match Config::resolve(cli) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("stepd: {err:#}");
            return std::process::ExitCode::from(2);
        }
    };
    let telemetry = stepd_api::telemetry::init(config.log_format);
    let code = match stepd_api::server::run(config).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err:#}");
            eprintln!("stepd: {err:#}");
            std::process::ExitCode::FAILURE
        }
    };
    telemetry.shutdown().await;
    code
}
