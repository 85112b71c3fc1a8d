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
        TokenCommand::Add { name, role, file } => {
            super::tokens::add(&file, &name, &role).map(|token| {
                println!("{token}");
                eprintln!(
                    "stepd: added token {name:?} ({role}) to {}; this is the only time it is shown",
                    file.display()
                );
            })
        }
        TokenCommand::Remove { name, file } => super::tokens::remove(&file, &name).map(|()| {
            eprintln!(
                "stepd: removed token {name:?} from {}; a daemon reading it refuses the token from its next request",
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
