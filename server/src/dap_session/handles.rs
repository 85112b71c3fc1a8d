//! stepd's own handles for frames, scopes and variables: the adapter's number
//! plus the stop epoch it belongs to, so a handle from an earlier stop is
//! recognised and refused (STALE_HANDLE) instead of silently meaning
//! something else.

use stepd_proto::v1::ErrorReason;

use crate::error::{ApiError, ApiResult};

/// Formats a handle: "<epoch>.<adapter reference>".
pub fn make(epoch: u64, reference: i64) -> String {
    format!("{epoch}.{reference}")
}

/// Parses a handle and checks it belongs to the current stop.
pub fn resolve(handle: &str, field: &str, current_epoch: u64) -> ApiResult<i64> {
    let (epoch, reference) = handle
        .split_once('.')
        .and_then(|(e, r)| Some((e.parse::<u64>().ok()?, r.parse::<i64>().ok()?)))
        .ok_or_else(|| {
            ApiError::invalid_field(field, format!("{handle:?} is not a stepd handle"))
        })?;
    if epoch != current_epoch {
        return Err(ApiError::new(
            ErrorReason::StaleHandle,
            format!("{field} {handle:?} belongs to an earlier stop; the program has moved since"),
        )
        .with(field, handle));
    }
    Ok(reference)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_expire_with_their_stop() {
        let h = make(3, 1001);
        assert_eq!(resolve(&h, "frame_id", 3).unwrap(), 1001);
        assert_eq!(
            resolve(&h, "frame_id", 4).unwrap_err().reason(),
            ErrorReason::StaleHandle
        );
        assert_eq!(
            resolve("nonsense", "frame_id", 4).unwrap_err().reason(),
            ErrorReason::InvalidArgument
        );
    }
}
