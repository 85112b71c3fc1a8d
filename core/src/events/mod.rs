//! Events: one daemon-wide sequence, per-session rings for resuming, a live
//! broadcast for fan-out, the state view that snapshots are made from, and
//! the memory Subscribe streams hold for their clients (the streams
//! themselves are the API's: `stepd::api::subscription`).

mod bus;
mod filter;
mod memory;
mod published;
mod view;

pub use bus::{CatchUp, EventBus, Start};
pub use filter::{Filter, Own, channel_of};
pub use memory::{Charge, StreamMemory, SubscriberMemory, Wire};
pub use published::Published;
pub use view::{StateView, snapshot_parts};
