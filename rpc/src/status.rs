//! The daemon's errors as gRPC statuses: an `ErrorInfo` in the stepd domain
//! and, when fields are at fault, a `BadRequest`; and back, for a status a
//! peer replica answered.

use stepd_core::error::{ApiError, Code, FieldViolation, reason_str};
use stepd_proto::{ERROR_DOMAIN, v1::ErrorReason};
use tonic::Status;
use tonic_types::{ErrorDetails, StatusExt};

/// An error as the status a client gets.
pub fn status(err: ApiError) -> Status {
    let mut details = ErrorDetails::with_error_info(
        reason_str(err.reason()),
        ERROR_DOMAIN,
        err.metadata().clone(),
    );
    if !err.violations().is_empty() {
        details.set_bad_request(
            err.violations()
                .iter()
                .map(|v| tonic_types::FieldViolation {
                    field: v.field.clone(),
                    description: v.description.clone(),
                    reason: v.reason.clone(),
                    ..Default::default()
                })
                .collect::<Vec<_>>(),
        );
    }
    Status::with_error_details(tonic_code(err.code()), err.bounded_message(), details)
}

/// `ApiError` → `Status`, in `map_err` and `?` chains.
pub trait IntoStatus {
    /// The status a client gets.
    fn into_status(self) -> Status;
}

impl IntoStatus for ApiError {
    fn into_status(self) -> Status {
        status(self)
    }
}

/// Results of the core's operations as a handler returns them.
pub trait OrStatus<T> {
    /// The error as a status.
    fn or_status(self) -> Result<T, Status>;
}

impl<T> OrStatus<T> for Result<T, ApiError> {
    fn or_status(self) -> Result<T, Status> {
        self.map_err(status)
    }
}

/// The core's code as tonic's.
pub fn tonic_code(code: Code) -> tonic::Code {
    tonic::Code::from_i32(code as i32)
}

/// Tonic's code as the core's.
pub fn core_code(code: tonic::Code) -> Code {
    Code::from_i32(code as i32)
}

/// Reads the stepd reason back out of a status (for stream-local error events).
pub fn reason_of(status: &Status) -> ErrorReason {
    status
        .get_details_error_info()
        .and_then(|info| ErrorReason::from_str_name(&format!("ERROR_REASON_{}", info.reason)))
        .unwrap_or(ErrorReason::Unspecified)
}

/// A stepd status (one a peer replica answered) as the error it was.
pub fn error_of(status: &Status) -> ApiError {
    let info = status.get_details_error_info();
    ApiError::from_parts(
        core_code(status.code()),
        reason_of(status),
        status.message().to_owned(),
        info.map(|i| i.metadata).unwrap_or_default(),
        status
            .get_details_bad_request()
            .map(|b| {
                b.field_violations
                    .into_iter()
                    .map(|v| FieldViolation {
                        field: v.field,
                        description: v.description,
                        reason: v.reason,
                    })
                    .collect()
            })
            .unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_stays_small_whatever_it_was_given() {
        let long = "€".repeat(50_000);
        let err = ApiError::new(ErrorReason::SessionNotFound, long.clone())
            .with("session_id", long.clone())
            .with_violations(vec![FieldViolation::new(long.clone(), long.clone()); 100]);
        let status = status(err);
        assert!(status.message().len() <= 1024);
        assert!(
            status.details().len() < 8 * 1024,
            "{}",
            status.details().len()
        );
        assert_eq!(reason_of(&status), ErrorReason::SessionNotFound);
    }

    #[test]
    fn codes_keep_their_values_both_ways() {
        for value in 0..=16 {
            let code = Code::from_i32(value);
            assert_eq!(code as i32, value);
            assert_eq!(core_code(tonic_code(code)), code);
        }
        assert_eq!(Code::from_i32(99), Code::Unknown);
    }

    #[test]
    fn a_peers_status_reads_back_as_the_error_it_was() {
        let err = ApiError::invalid_field("spec.condition", "bad").with("x", "y");
        let back = error_of(&status(err.clone()));
        assert_eq!(back.code(), err.code());
        assert_eq!(back.reason(), err.reason());
        assert_eq!(back.metadata(), err.metadata());
        assert_eq!(back.violations(), err.violations());
    }
}
