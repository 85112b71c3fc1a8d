//! Debug Adapter Protocol: framing, the client, the kinds of adapter and
//! their quirks (`kind`), the adapter registry and the launch arguments each
//! adapter expects.

pub mod adapters;
pub mod capability;
pub mod client;
pub mod codec;
pub mod kind;
pub mod messages;
pub mod process;
pub mod registry;
pub mod transport;
pub mod version_probe;
