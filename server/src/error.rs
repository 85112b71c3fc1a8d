//! Typed errors: every failure leaves the daemon as a gRPC status carrying a
//! `google.rpc.ErrorInfo` whose reason comes from `stepd.v1.ErrorReason`.

use std::collections::HashMap;

use stepd_proto::{ERROR_DOMAIN, v1::ErrorReason};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, FieldViolation, StatusExt};

/// An error on its way to a client: code, reason, message and specifics.
#[derive(Debug, Clone)]
pub struct ApiError {
    code: Code,
    reason: ErrorReason,
    message: String,
    metadata: HashMap<String, String>,
    violations: Vec<FieldViolation>,
}

impl ApiError {
    /// An error with the gRPC code that goes with `reason`.
    pub fn new(reason: ErrorReason, message: impl Into<String>) -> Self {
        Self {
            code: code_for(reason),
            reason,
            message: message.into(),
            metadata: HashMap::new(),
            violations: Vec::new(),
        }
    }

    /// Adds a key to `ErrorInfo.metadata`.
    pub fn with(mut self, key: &str, value: impl Into<String>) -> Self {
        self.metadata.insert(key.to_owned(), value.into());
        self
    }

    /// `INVALID_ARGUMENT` for malformed fields, each named in a `BadRequest` detail.
    pub fn invalid(violations: Vec<FieldViolation>) -> Self {
        let message = violations
            .iter()
            .map(|v| format!("{}: {}", v.field, v.description))
            .collect::<Vec<_>>()
            .join("; ");
        let mut err = Self::new(ErrorReason::InvalidArgument, message);
        if let Some(first) = violations.first() {
            err.metadata.insert("field".into(), first.field.clone());
        }
        err.violations = violations;
        err
    }

    /// Names the fields at fault in a `BadRequest` detail, whatever the reason.
    pub fn with_violations(mut self, violations: Vec<FieldViolation>) -> Self {
        self.violations = violations;
        self
    }

    /// The `BadRequest` field violations this error carries.
    pub fn violations(&self) -> &[FieldViolation] {
        &self.violations
    }

    /// `INVALID_ARGUMENT` for one malformed field.
    pub fn invalid_field(field: &str, description: impl Into<String>) -> Self {
        Self::invalid(vec![FieldViolation::new(field, description)])
    }

    /// `INTERNAL` for a bug; the message says what.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorReason::Internal, message)
    }

    /// The reason.
    pub fn reason(&self) -> ErrorReason {
        self.reason
    }
}

/// The reason as sent in `ErrorInfo.reason`: the enum name without its prefix.
pub fn reason_str(reason: ErrorReason) -> &'static str {
    reason
        .as_str_name()
        .strip_prefix("ERROR_REASON_")
        .unwrap_or("UNSPECIFIED")
}

fn code_for(reason: ErrorReason) -> Code {
    use ErrorReason as R;
    match reason {
        R::SessionNotFound | R::PauseNotFound | R::BreakpointNotFound | R::InspectorNotFound => {
            Code::NotFound
        }
        R::AlreadyAnswered
        | R::NotStopped
        | R::StaleHandle
        | R::AdapterNotFound
        | R::SessionEnded
        | R::LaunchFailed
        | R::AdapterError => Code::FailedPrecondition,
        R::AdapterDied | R::ShuttingDown | R::StoreUnavailable => Code::Unavailable,
        R::UnsupportedByAdapter | R::NotImplemented => Code::Unimplemented,
        R::ProtocolError | R::Internal | R::Unspecified => Code::Internal,
        R::InvalidCommand | R::InvalidArgument | R::InvalidValue => Code::InvalidArgument,
        R::LimitExceeded => Code::ResourceExhausted,
        R::Unauthenticated => Code::Unauthenticated,
        R::PermissionDenied => Code::PermissionDenied,
    }
}

impl From<ApiError> for Status {
    fn from(err: ApiError) -> Self {
        let mut details = ErrorDetails::with_error_info(
            reason_str(err.reason),
            ERROR_DOMAIN,
            err.metadata.clone(),
        );
        if !err.violations.is_empty() {
            details.set_bad_request(err.violations.clone());
        }
        Status::with_error_details(err.code, err.message, details)
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        tracing::error!(error = %err, "store error");
        ApiError::new(ErrorReason::StoreUnavailable, format!("store: {err}"))
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, reason_str(self.reason))
    }
}

impl std::error::Error for ApiError {}

/// Reads the stepd reason back out of a status (for stream-local error events).
pub fn reason_of(status: &Status) -> ErrorReason {
    status
        .get_details_error_info()
        .and_then(|info| ErrorReason::from_str_name(&format!("ERROR_REASON_{}", info.reason)))
        .unwrap_or(ErrorReason::Unspecified)
}

/// Result alias for daemon operations.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// The error as a stream-local `error` event payload.
    pub fn to_stream_error(&self, key: &str) -> stepd_proto::v1::StreamError {
        stepd_proto::v1::StreamError {
            code: self.code as i32,
            reason: self.reason.into(),
            message: self.message.clone(),
            key: key.to_owned(),
            metadata: self.metadata.clone(),
        }
    }
}
