//! Programs under Debug Adapter Protocol adapters (debugpy, lldb-dap, dlv):
//! framing, the client, the kinds of adapter and their quirks (`kind`), the
//! adapter registry and the launch arguments each adapter expects; and in
//! `session`, the DAP session: Launch and Attach, and one actor per session
//! that implements the core's session port over its adapter.

pub mod adapters;
pub mod capability;
pub mod client;
pub mod codec;
pub mod kind;
pub mod messages;
pub mod names;
pub mod process;
pub mod registry;
pub mod session;
pub mod traceback;
pub mod transport;
pub mod version_probe;
