//! stepd, the debugging daemon: the gRPC API over the core.
//!
//! Follow a request from `api/` (thin handlers) into the crate that owns the
//! behaviour: `stepd-core` (sessions, the pause book, breakpoints, events,
//! the inspector), `stepd-store`, `stepd-dap` (the protocol, the adapters
//! and DAP sessions) and `stepd-probe` (probe sessions). Here: the handlers,
//! auth, TLS, telemetry, the cluster and the history.

pub mod api;
pub mod auth;
pub mod config;
pub mod conns;
pub mod daemon;
pub mod health;
pub mod http_limits;
pub mod log_writer;
pub mod malformed;
pub mod peer;
pub mod reflection;
pub mod server;
pub mod telemetry;
pub mod tls;

#[cfg(test)]
mod pause_table;
