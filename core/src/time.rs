//! Wall-clock helpers shared by the store, events and the API.

use std::time::{SystemTime, UNIX_EPOCH};

use prost_types::Timestamp;

/// Microseconds since the Unix epoch.
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A protobuf timestamp from microseconds since the epoch.
pub fn timestamp_from_us(us: i64) -> Timestamp {
    Timestamp {
        seconds: us.div_euclid(1_000_000),
        nanos: i32::try_from(us.rem_euclid(1_000_000) * 1000).unwrap_or(0),
    }
}

/// Microseconds since the epoch of a protobuf timestamp (saturating).
pub fn us_from_timestamp(ts: &Timestamp) -> i64 {
    ts.seconds
        .saturating_mul(1_000_000)
        .saturating_add(i64::from(ts.nanos) / 1000)
}

/// Now, as a protobuf timestamp.
pub fn now_timestamp() -> Timestamp {
    timestamp_from_us(now_us())
}
