//! One module per group of subcommands.

pub mod breakpoints;
pub mod daemon;
pub mod watch;
