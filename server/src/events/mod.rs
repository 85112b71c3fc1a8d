//! Events: one daemon-wide sequence, per-session rings for resuming, a live
//! broadcast for fan-out, the state view that snapshots are made from, and
//! Subscribe streams with what they hold for their clients.

mod bus;
mod filter;
mod memory;
mod published;
mod subscription;
mod view;

pub use bus::{CatchUp, EventBus, Start};
pub use filter::{Filter, Own, channel_of};
pub use memory::{StreamMemory, SubscriberMemory};
pub use published::Published;
pub use subscription::{Out, Subscriber};
pub use view::StateView;
