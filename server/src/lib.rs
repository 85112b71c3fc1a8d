//! stepd, the debugging daemon: sessions, breakpoints, pauses and events
//! behind a gRPC API (`stepd.v1`).
//!
//! Follow a request from `api/` (thin handlers) into the module that owns the
//! behaviour: `breakpoints`, `events`, `store`, `dap` (the protocol and the
//! adapters), `session` (the kind-neutral core and its pause book),
//! `dap_session` and `probe` (the two kinds of session), `inspector`.

pub mod api;
pub mod auth;
pub mod breakpoints;
pub mod cluster;
pub mod config;
pub mod conns;
pub mod daemon;
pub mod dap;
pub mod dap_session;
pub mod error;
pub mod events;
pub mod health;
pub mod history;
pub mod inspector;
pub mod json;
pub mod limits;
pub mod log_writer;
pub mod malformed;
pub mod metrics;
pub mod peer;
pub mod probe;
pub mod redact;
pub mod reflection;
pub mod server;
pub mod session;
pub mod slots;
pub mod telemetry;
pub mod time;
pub mod tls;
