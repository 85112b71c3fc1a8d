//! Debug Adapter Protocol: framing, the client, the adapter registry and the
//! launch arguments each adapter expects.

pub mod adapters;
pub mod client;
pub mod codec;
pub mod registry;
pub mod transport;
