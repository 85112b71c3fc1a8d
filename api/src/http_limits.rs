//! Size limits at the HTTP edge: a request's headers before anything reads
//! them, and tonic's message-size refusal rewritten as LIMIT_EXCEEDED. The
//! limits themselves are the core's (`stepd_core::limits`).

use stepd_core::{
    error::{ApiError, ApiResult},
    limits::{AUTHORIZATION_BYTES, HEADER_BYTES, Sizes},
};
use stepd_proto::v1::ErrorReason;
use tonic::{Code, Status, body::Body, codegen::http};

use stepd_rpc::status::status;

/// A request's headers, before anything reads them.
pub fn headers(path: &str, headers: &http::HeaderMap) -> ApiResult<()> {
    const PER_HEADER: usize = 32;
    let total = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + PER_HEADER)
        .sum::<usize>()
        + path.len()
        + PER_HEADER;
    let authorization = headers
        .get_all(http::header::AUTHORIZATION)
        .iter()
        .map(|v| v.len())
        .sum();
    Sizes::default()
        .size("authorization", authorization, AUTHORIZATION_BYTES)
        .size("metadata", total, HEADER_BYTES)
        .check()
}

/// Rewrites tonic's "message length too large" refusals (trailers-only
/// responses, so the status is in the headers) into LIMIT_EXCEEDED.
pub fn remap_size_refusal(response: http::Response<Body>) -> http::Response<Body> {
    match Status::from_header_map(response.headers()) {
        Some(refused)
            if refused.code() == Code::OutOfRange
                && refused.message().contains("message length too large") =>
        {
            let err = ApiError::new(ErrorReason::LimitExceeded, refused.message())
                .with("limit", "max_message_bytes");
            status(err).into_http()
        }
        _ => response,
    }
}

#[cfg(test)]
mod tests {
    use stepd_core::limits::{CONDITION_BYTES, NAME_BYTES, breakpoint_spec};
    use stepd_proto::v1::{BreakpointSpec, FunctionLocation, breakpoint_spec::Location};

    use super::*;

    #[test]
    fn every_field_over_is_named_and_the_first_in_metadata() {
        let spec = BreakpointSpec {
            location: Some(Location::Function(FunctionLocation {
                name: "f".repeat(NAME_BYTES.max + 1),
            })),
            condition: "c".repeat(CONDITION_BYTES.max + 1),
            ..Default::default()
        };
        let err = breakpoint_spec(&spec, "spec").check().unwrap_err();
        assert_eq!(err.reason(), ErrorReason::LimitExceeded);
        let fields: Vec<_> = err.violations().iter().map(|v| v.field.as_str()).collect();
        assert_eq!(fields, ["spec.function.name", "spec.condition"]);
        let status = status(err);
        assert_eq!(status.code(), Code::ResourceExhausted);
        use tonic_types::StatusExt;
        let info = status.get_details_error_info().unwrap();
        assert_eq!(info.metadata["limit"], "name_bytes");
        assert_eq!(info.metadata["max"], "4096");
        assert_eq!(info.metadata["field"], "spec.function.name");
    }

    #[test]
    fn headers_are_bounded_one_by_one_and_together() {
        let mut map = http::HeaderMap::new();
        let token = format!("Bearer {}", "t".repeat(AUTHORIZATION_BYTES.max - 7));
        map.insert(http::header::AUTHORIZATION, token.parse().unwrap());
        assert!(headers("/stepd.v1.DaemonService/Ping", &map).is_ok());
        map.insert(
            http::header::AUTHORIZATION,
            format!("{token}x").parse().unwrap(),
        );
        let err = headers("/p", &map).unwrap_err();
        assert_eq!(err.reason(), ErrorReason::LimitExceeded);
        assert_eq!(err.violations()[0].field, "authorization");
        let status = status(err);
        assert!(status.message().len() < 300, "never quotes the headers");
        let mut map = http::HeaderMap::new();
        map.insert("x-a", "a".repeat(HEADER_BYTES.max / 2).parse().unwrap());
        assert!(headers("/p", &map).is_ok());
        map.insert("x-b", "b".repeat(HEADER_BYTES.max / 2).parse().unwrap());
        let err = headers("/p", &map).unwrap_err();
        assert_eq!(err.violations()[0].field, "metadata");
        assert!(headers(&"/".repeat(HEADER_BYTES.max), &http::HeaderMap::new()).is_err());
    }
}
