//! Exit codes and error reporting. Every stepd error reason has its own exit
//! code, so scripts can branch on `$?` without parsing text.

use std::process::ExitCode;

use stepd_proto::v1::ErrorReason;
use tonic::Status;
use tonic_types::StatusExt;

/// Usage errors (clap uses 2 as well).
pub const USAGE: u8 = 2;
/// The daemon could not be reached (or started).
pub const UNREACHABLE: u8 = 3;
/// A gRPC error without a stepd reason.
pub const GRPC: u8 = 4;
/// `continue`, `step` or `pause` with `--wait`: the wait ran out before
/// the session was stable (its state is printed all the same).
pub const TIMED_OUT: u8 = 5;
/// Reasons map to `REASON_BASE + reason number`.
pub const REASON_BASE: u8 = 10;

/// The exit code for a reason.
pub fn for_reason(reason: ErrorReason) -> u8 {
    REASON_BASE.saturating_add(u8::try_from(reason as i32).unwrap_or(0))
}

/// Help text listing every exit code (appended to `stepctl --help`).
pub fn table() -> String {
    let mut out = String::from(
        "Exit codes:\n  0   success\n  1   other failure\n  2   usage error\n  3   daemon unreachable\n  4   gRPC error without a stepd reason\n  5   --wait timed out before the session was stable\n",
    );
    for n in 1.. {
        let Ok(reason) = ErrorReason::try_from(n) else {
            break;
        };
        let name = reason.as_str_name().trim_start_matches("ERROR_REASON_");
        out.push_str(&format!("  {:<3} {name}\n", for_reason(reason)));
    }
    out
}

/// A failure on its way out of stepctl.
#[derive(Debug)]
pub enum Failure {
    /// A status from the daemon.
    Status(Status),
    /// The daemon is unreachable.
    Unreachable(String),
    /// Bad command-line input.
    Usage(String),
    /// A wait ran out (what was waited for is said already).
    TimedOut(String),
    /// Anything else.
    Other(anyhow::Error),
}

impl From<Status> for Failure {
    fn from(status: Status) -> Self {
        Failure::Status(status)
    }
}

impl From<anyhow::Error> for Failure {
    fn from(err: anyhow::Error) -> Self {
        Failure::Other(err)
    }
}

impl Failure {
    /// Prints the failure (as JSON when asked) and returns its exit code.
    pub fn report(&self, json: bool) -> ExitCode {
        let (code, reason, message, violations) = match self {
            Failure::Status(status) => {
                let info = status.get_details_error_info();
                let reason = info.as_ref().map(|i| i.reason.clone()).unwrap_or_default();
                let code = ErrorReason::from_str_name(&format!("ERROR_REASON_{reason}"))
                    .map(for_reason)
                    .unwrap_or(GRPC);
                let violations = status
                    .get_details_bad_request()
                    .map(|b| {
                        b.field_violations
                            .into_iter()
                            .map(|v| (v.field, v.description))
                            .collect()
                    })
                    .unwrap_or_default();
                // A transport failure's words are in its causes ("received
                // fatal alert: CertificateRequired"), not in its message.
                // An evaluation's traceback loses the debugger's own frames.
                let mut message = crate::render::events::user_error(status.message());
                let mut source = std::error::Error::source(status);
                while let Some(cause) = source {
                    let words = cause.to_string();
                    if !message.contains(&words) {
                        message = format!("{message}: {words}");
                    }
                    source = cause.source();
                }
                (code, reason, message, violations)
            }
            Failure::Unreachable(msg) => (UNREACHABLE, "UNREACHABLE".into(), msg.clone(), vec![]),
            Failure::Usage(msg) => (USAGE, "USAGE".into(), msg.clone(), vec![]),
            Failure::TimedOut(msg) => (TIMED_OUT, "TIMED_OUT".into(), msg.clone(), vec![]),
            Failure::Other(err) => (1, String::new(), format!("{err:#}"), vec![]),
        };
        if json {
            let violations: Vec<_> = violations
                .iter()
                .map(|(f, d)| serde_json::json!({"field": f, "description": d}))
                .collect();
            eprintln!(
                "{}",
                serde_json::json!({"error": {"reason": reason, "message": message, "exitCode": code, "fieldViolations": violations}})
            );
        } else {
            if !violations.is_empty() {
                eprintln!("stepctl: invalid request ({reason})");
            } else if reason.is_empty() {
                eprintln!("stepctl: {message}");
            } else {
                eprintln!("stepctl: {message} ({reason})");
            }
            for (field, description) in &violations {
                eprintln!("  {field}: {description}");
            }
        }
        ExitCode::from(code)
    }
}
