//! The gRPC API of stepd, the debugging daemon.
//!
//! Follow a request from `handlers/` (thin: translate, delegate) into the
//! crate that owns the behaviour: `stepd-core` (sessions, the pause book,
//! breakpoints, events, the inspector), `stepd-store`, `stepd-dap` (the
//! protocol, the adapters and DAP sessions), `stepd-probe` (probe sessions),
//! `stepd-history` and `stepd-cluster`. Here, around the handlers: auth,
//! TLS and telemetry as tower layers (`auth/`, `tls/`, `telemetry.rs`), the
//! server that binds and drains (`server.rs`), the configuration and the
//! state every handler shares (`daemon.rs`).

pub mod auth;
pub mod config;
pub mod conns;
pub mod daemon;
pub mod handlers;
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
