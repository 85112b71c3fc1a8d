//! Events: one daemon-wide sequence, per-session rings for resuming, a live
//! broadcast for fan-out, and the state view that snapshots are made from.

mod bus;
mod filter;
mod subscription;
mod view;

pub use bus::{EventBus, Start};
pub use filter::{Filter, Own, channel_of};
pub use subscription::Subscriber;
pub use view::StateView;
