//! stepd's own handles for frames, scopes and variables: the adapter's number
//! plus the stop epoch it belongs to, so a handle from an earlier stop is
//! recognised and refused (STALE_HANDLE) instead of silently meaning
//! something else.

use stepd_proto::v1::ErrorReason;

use stepd_core::error::{ApiError, ApiResult};

/// Formats a handle: "<epoch>.<adapter reference>".
pub fn make(epoch: u64, reference: i64) -> String {
    format!("{epoch}.{reference}")
}

/// Formats the handle of a scope whose adapter reference means that scope
/// only while its frame is the one last asked for (lldb numbers every
/// frame's Locals 1): "<epoch>.<adapter reference>@<adapter frame id>".
pub fn make_scoped(epoch: u64, reference: i64, frame: i64) -> String {
    format!("{epoch}.{reference}@{frame}")
}

/// Parses a handle and checks it belongs to the current stop.
pub fn resolve(handle: &str, field: &str, current_epoch: u64) -> ApiResult<i64> {
    resolve_scoped(handle, field, current_epoch).map(|(reference, _)| reference)
}

/// Parses a handle of either form and checks it belongs to the current
/// stop: the adapter reference and, for a scope's handle, its frame.
pub fn resolve_scoped(
    handle: &str,
    field: &str,
    current_epoch: u64,
) -> ApiResult<(i64, Option<i64>)> {
    let (epoch, reference, frame) = handle
        .split_once('.')
        .and_then(|(e, rest)| {
            let (r, f) = match rest.split_once('@') {
                Some((r, f)) => (r, Some(f.parse::<i64>().ok()?)),
                None => (rest, None),
            };
            Some((e.parse::<u64>().ok()?, r.parse::<i64>().ok()?, f))
        })
        .ok_or_else(|| {
            ApiError::invalid_field(
                field,
                format!("{} is not a stepd handle", stepd_core::error::quote(handle)),
            )
        })?;
    if epoch != current_epoch {
        return Err(ApiError::new(
            ErrorReason::StaleHandle,
            format!(
                "{field} {} belongs to an earlier stop; the program has moved since",
                stepd_core::error::quote(handle)
            ),
        )
        .with(field, stepd_core::error::clip(handle)));
    }
    Ok((reference, frame))
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

    #[test]
    fn a_scope_handle_names_its_frame() {
        let h = make_scoped(3, 1, 524289);
        assert_eq!(
            resolve_scoped(&h, "variables_ref", 3).unwrap(),
            (1, Some(524289))
        );
        assert_eq!(resolve(&h, "variables_ref", 3).unwrap(), 1);
        assert_eq!(
            resolve_scoped("3.7", "variables_ref", 3).unwrap(),
            (7, None)
        );
        assert_eq!(
            resolve_scoped(&h, "variables_ref", 4).unwrap_err().reason(),
            ErrorReason::StaleHandle
        );
        assert_eq!(
            resolve_scoped("3.1@x", "variables_ref", 3)
                .unwrap_err()
                .reason(),
            ErrorReason::InvalidArgument
        );
    }
}
