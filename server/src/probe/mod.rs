//! Probe sessions: instrumented programs that hold at their own pause points.
//! `session` is the actor behind one `ProbeService.Connect` stream; probes
//! decide locally which points hold, from the arming the actor sends them.

pub mod session;
pub mod value;
