//! Debug Adapter Protocol: the adapter registry (how each adapter is found
//! and what it is called with).

pub mod registry;
