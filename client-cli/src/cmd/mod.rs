//! One module per group of subcommands.

pub mod baggage;
pub mod breakpoints;
pub mod completion;
pub mod daemon;
pub mod debug;
pub mod docs;
pub mod ended;
pub mod history;
pub mod inspect;
pub mod inspector;
pub mod pauses;
pub mod select;
pub mod sessions;
pub mod watch;
