//! `baggage mint`: a W3C baggage entry that marks one person's requests, and
//! the breakpoint selector that holds only those. Needs no daemon.

use std::io::Read as _;

use clap::{Args, Subcommand};

use crate::exit::Failure;

/// Baggage subcommands.
#[derive(Debug, Subcommand)]
pub enum BaggageCommand {
    /// Mint a baggage entry for a debugging session: prints the header to send
    /// (`curl -H "baggage: …"`) and the matching `break add --baggage` value.
    Mint(MintArgs),
}

/// Arguments of `baggage mint`.
#[derive(Debug, Args)]
pub struct MintArgs {
    /// The baggage key.
    #[arg(long, default_value = "debug-session")]
    pub key: String,
}

/// 64 random bits as 16 hex digits: unique among the sessions of one mesh,
/// and a value a `baggage` header carries without percent-encoding.
fn random_id() -> Result<String, Failure> {
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| Failure::Usage(format!("cannot read /dev/urandom: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Prints a fresh entry: `baggage: KEY=ID`, then `--baggage KEY=ID`.
pub fn run(command: BaggageCommand, json: bool) -> Result<(), Failure> {
    let BaggageCommand::Mint(args) = command;
    if args.key.is_empty()
        || !args
            .key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    {
        return Err(Failure::Usage(format!(
            "--key {:?} is not a W3C baggage key (letters, digits and !#$%&'*+-.^_`|~)",
            args.key
        )));
    }
    let entry = format!("{}={}", args.key, random_id()?);
    if json {
        println!(
            "{}",
            serde_json::json!({
                "key": args.key,
                "value": entry.split_once('=').map(|(_, v)| v).unwrap_or_default(),
                "header": format!("baggage: {entry}"),
                "selector": entry,
            })
        );
    } else {
        println!("baggage: {entry}");
        println!("--baggage {entry}");
    }
    Ok(())
}
