//! The core of stepd: what a debug session is, whatever debugs it.
//!
//! - `session`: the registry of sessions, the kind-neutral port both kinds
//!   implement, and the pause book (one pause protocol for DAP and probes).
//! - `breakpoints`: the breakpoint model, its hit verdict, and the registry
//!   that reaches the store through the `BreakpointStore` port.
//! - `events`: the bus, its state view and the memory of its streams.
//! - `inspector`: navigation of values too large to send at once.
//! - `error`, `limits`: typed errors and size limits, transport-free.
//!
//! Nothing here knows of gRPC, HTTP, a database or a debug adapter: the
//! crates above implement the ports and translate (`stepd-dap`,
//! `stepd-probe`, `stepd-store`, and the API in `stepd`).

pub mod breakpoints;
pub mod error;
pub mod events;
pub mod glob;
pub mod identity;
pub mod inspector;
pub mod json;
pub mod limits;
pub mod metrics;
pub mod redact;
pub mod session;
pub mod slots;
pub mod time;
pub mod trace;
pub mod within;
