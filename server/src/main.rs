//! `stepd`: parse the configuration, start logging, serve.

use clap::Parser;
use stepd::config::{Cli, Config};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut cli = Cli::parse();
    if let Some(command) = cli.command.take() {
        return stepd::auth::cli::run(command);
    }
    let config = match Config::resolve(cli) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("stepd: {err:#}");
            return std::process::ExitCode::from(2);
        }
    };
    let telemetry = stepd::telemetry::init(config.log_format);
    let code = match stepd::server::run(config).await {
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
