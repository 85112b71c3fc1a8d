//! stepd, the debugging daemon: the gRPC API over the core.
//!
//! Follow a request from `api/` (thin handlers) into the crate that owns the
//! behaviour: `stepd-core` (sessions, the pause book, breakpoints, events,
//! the inspector), `stepd-store`, and here `dap` (the protocol and the
//! adapters), `dap_session` and `probe` (the two kinds of session).

pub mod api;
pub mod auth;
pub mod cluster;
pub mod config;
pub mod conns;
pub mod daemon;
pub mod dap;
pub mod dap_session;
pub mod health;
pub mod history;
pub mod http_limits;
pub mod log_writer;
pub mod malformed;
pub mod peer;
pub mod probe;
pub mod reflection;
pub mod server;
pub mod status;
pub mod telemetry;
pub mod tls;

#[cfg(test)]
mod pause_table;
