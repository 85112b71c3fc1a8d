//! Malformed request messages: tonic's decoder refuses them with a bare
//! INTERNAL, which `docs/errors.md` reserves for bugs in stepd, so they are
//! rewritten into INVALID_ARGUMENT with an `ErrorInfo` and a field violation.

use stepd_rpc::status::IntoStatus as _;
use tonic::{Code, Status, body::Body, codegen::http};

use stepd_core::error::ApiError;

/// How tonic and prost start the messages of the statuses they make when a
/// request's bytes cannot be read as its message.
const DECODE_FAILURES: &[&str] = &[
    "failed to decode Protobuf message",
    "protocol error: received message with",
    "Error decompressing",
    "Unexpected EOF decoding stream",
    "Missing request message",
];

/// The most of tonic's description quoted back, so a hostile input cannot
/// make the error itself large.
const QUOTED: usize = 200;

/// True when `status` is tonic's refusal of an unreadable request message
/// (and not an error stepd built, which always carries details).
pub fn is_decode_failure(status: &Status) -> bool {
    status.code() == Code::Internal
        && status.details().is_empty()
        && DECODE_FAILURES
            .iter()
            .any(|prefix| status.message().starts_with(prefix))
}

/// The INVALID_ARGUMENT that replaces a decode failure.
pub fn refusal(status: &Status) -> Status {
    let mut said = status.message().to_owned();
    if said.len() > QUOTED {
        let mut end = QUOTED;
        while !said.is_char_boundary(end) {
            end -= 1;
        }
        said.truncate(end);
        said.push('…');
    }
    ApiError::invalid_field(
        "request",
        format!("the request is not a valid protobuf message of its type: {said}"),
    )
    .into_status()
}

/// Rewrites a trailers-only response carrying a decode failure (a unary or
/// server-streaming request that could not be read).
pub fn remap_decode_refusal(response: http::Response<Body>) -> http::Response<Body> {
    match Status::from_header_map(response.headers()) {
        Some(status) if is_decode_failure(&status) => refusal(&status).into_http(),
        _ => response,
    }
}

#[cfg(test)]
mod tests {
    use stepd_proto::v1::ErrorReason;

    use super::*;

    #[test]
    fn only_tonic_decode_failures_are_rewritten() {
        let decode = Status::internal("failed to decode Protobuf message: invalid varint");
        assert!(is_decode_failure(&decode));
        let rewritten = refusal(&decode);
        assert_eq!(rewritten.code(), Code::InvalidArgument);
        assert_eq!(
            stepd_rpc::status::reason_of(&rewritten),
            ErrorReason::InvalidArgument
        );
        let ours: Status =
            stepd_rpc::status::status(ApiError::internal("failed to decode Protobuf message"));
        assert!(!is_decode_failure(&ours), "stepd's own errors stay");
        assert!(!is_decode_failure(&Status::internal("something else")));
        let long = Status::internal(format!(
            "failed to decode Protobuf message: {}",
            "é".repeat(500)
        ));
        assert!(refusal(&long).message().len() < 400);
    }
}
