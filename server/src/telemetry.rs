//! Logging: `tracing` to stderr, filtered by `RUST_LOG`, as text or JSON lines.

use tracing_subscriber::{EnvFilter, fmt};

use crate::config::LogFormat;

/// Installs the global subscriber. Call once, before anything logs.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    if let Err(err) = result {
        eprintln!("stepd: logging was already initialised: {err}");
    }
}
