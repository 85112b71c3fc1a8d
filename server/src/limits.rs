//! Size limits: tonic refuses oversized messages with a bare OUT_OF_RANGE;
//! clients of stepd expect RESOURCE_EXHAUSTED with reason LIMIT_EXCEEDED, as
//! for every other limit, so the refusal is rewritten on its way out.

use stepd_proto::v1::ErrorReason;
use tonic::{Code, Status, body::Body, codegen::http};

use crate::error::ApiError;

/// Rewrites tonic's "message length too large" refusals (trailers-only
/// responses, so the status is in the headers) into LIMIT_EXCEEDED.
pub fn remap_size_refusal(response: http::Response<Body>) -> http::Response<Body> {
    match Status::from_header_map(response.headers()) {
        Some(status)
            if status.code() == Code::OutOfRange
                && status.message().contains("message length too large") =>
        {
            let err = ApiError::new(ErrorReason::LimitExceeded, status.message())
                .with("limit", "max_message_bytes");
            Status::from(err).into_http()
        }
        _ => response,
    }
}
