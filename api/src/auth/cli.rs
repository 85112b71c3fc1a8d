//! `stepd token …`: creating and revoking bearer tokens.

use std::path::PathBuf;

/// What `stepd` does instead of serving.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Manage the bearer tokens file (see docs/security.md).
    #[command(subcommand)]
    Token(TokenCommand),
}

/// `stepd token …`.
#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Adds a token to FILE (created 0600) and prints it once; only its hash is kept.
    Add {
        /// The token's name (letters, digits, '.', '_', '-', '@'); it authenticates as `token:NAME`.
        name: String,
        /// viewer, controller, admin or probe.
        role: String,
        /// The tokens file the daemon reads (--auth-tokens).
        #[arg(long)]
        file: PathBuf,
        /// When the token stops being accepted: an RFC 3339 time in UTC
        /// (2030-01-31T00:00:00Z) or a duration from now (30d, 12h). Never, when absent.
        #[arg(long, value_name = "WHEN")]
        expires: Option<String>,
    },
    /// Removes the token NAME from FILE, revoking it.
    Remove {
        /// The token's name.
        name: String,
        /// The tokens file the daemon reads (--auth-tokens).
        #[arg(long)]
        file: PathBuf,
    },
}

/// Runs a command; the exit code is 0 on success, 1 on failure.
pub fn run(command: Command) -> std::process::ExitCode {
    let Command::Token(command) = command;
    let result = match command {
        TokenCommand::Add {
            name,
            role,
            file,
            expires,
        } => expires
            .map(|when| super::tokens::parse_expiry(&when, std::time::SystemTime::now()))
            .transpose()
            .and_then(|expires| {
                let token = super::tokens::add(&file, &name, &role, expires)?;
                println!("{token}");
                let until = expires.map_or_else(String::new, |at| {
                    format!(", expiring {}", super::tokens::format_time(at))
                });
                eprintln!(
                    "stepd: added token {name:?} ({role}{until}) to {}; this is the only time it is shown",
                    file.display()
                );
                Ok(())
            }),
        TokenCommand::Remove { name, file } => super::tokens::remove(&file, &name).map(|()| {
            eprintln!(
                "stepd: removed token {name:?} from {}; a daemon reading it refuses the token from its next request and ends the streams it opened within 2 s",
                file.display()
            );
        }),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("stepd: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
