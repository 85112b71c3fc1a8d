//! One module per group of subcommands.

pub mod breakpoints;
pub mod daemon;
pub mod inspect;
pub mod sessions;
pub mod watch;
