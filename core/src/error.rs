//! Typed errors: every failure leaves the daemon as a gRPC status carrying a
//! `google.rpc.ErrorInfo` whose reason comes from `stepd.v1.ErrorReason`.
//! The error is built here, free of any transport; the API crate turns it
//! into a status (`stepd_rpc::status`).

use std::collections::HashMap;

use stepd_proto::v1::ErrorReason;

/// A gRPC status code, as the API sends it (the values are gRPC's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Code {
    Ok = 0,
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

impl Code {
    /// The code with gRPC's value `value` (`Unknown` for one gRPC does not define).
    pub fn from_i32(value: i32) -> Self {
        use Code as C;
        const ALL: [Code; 17] = [
            C::Ok,
            C::Cancelled,
            C::Unknown,
            C::InvalidArgument,
            C::DeadlineExceeded,
            C::NotFound,
            C::AlreadyExists,
            C::PermissionDenied,
            C::ResourceExhausted,
            C::FailedPrecondition,
            C::Aborted,
            C::OutOfRange,
            C::Unimplemented,
            C::Internal,
            C::Unavailable,
            C::DataLoss,
            C::Unauthenticated,
        ];
        usize::try_from(value)
            .ok()
            .and_then(|i| ALL.get(i).copied())
            .unwrap_or(C::Unknown)
    }
}

/// One field at fault, as a `google.rpc.BadRequest` names it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldViolation {
    /// The field's path, e.g. `spec.condition`.
    pub field: String,
    /// What is wrong with it.
    pub description: String,
    /// A machine-readable kind of violation (`INVALID_VALUE`); empty when none.
    pub reason: String,
}

impl FieldViolation {
    /// A violation of `field`.
    pub fn new(field: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            description: description.into(),
            reason: String::new(),
        }
    }
}

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
            // Whole here, for events such as eval_error that carry an
            // adapter's full words; cut when it leaves as a status.
            message: message.into(),
            metadata: HashMap::new(),
            violations: Vec::new(),
        }
    }

    /// Adds a key to `ErrorInfo.metadata` (a client-supplied value goes
    /// through [`clip`] first).
    pub fn with(mut self, key: &str, value: impl Into<String>) -> Self {
        self.metadata
            .insert(key.to_owned(), bounded(value.into(), MAX_METADATA_BYTES));
        self
    }

    /// `INVALID_ARGUMENT` for malformed fields, each named in a `BadRequest` detail.
    pub fn invalid(violations: Vec<FieldViolation>) -> Self {
        let violations = bounded_violations(violations);
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
        self.violations = bounded_violations(violations);
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

    /// The whole message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The gRPC code it is sent with.
    pub fn code(&self) -> Code {
        self.code
    }
}

/// How many characters of a client-supplied value an error quotes: enough to
/// recognise it, and small enough that the status fits any client's trailer
/// limit (grpcio's is 8 KiB) however long the value was.
pub const QUOTE_CHARS: usize = 64;

/// Backstops for what no call site bounded, in bytes: a status's message, one
/// metadata value and one field violation are cut there, so a forgotten
/// [`quote`] can never make a status too large to deliver.
const MAX_MESSAGE_BYTES: usize = 1024;
const MAX_METADATA_BYTES: usize = 512;
const MAX_FIELD_BYTES: usize = 128;
const MAX_DESCRIPTION_BYTES: usize = 256;
const MAX_VIOLATIONS: usize = 16;

/// A client-supplied value as an error message quotes it: Debug-quoted, and if
/// longer than [`QUOTE_CHARS`] characters, its prefix then `…` and its length.
pub fn quote(value: &str) -> String {
    match value.char_indices().nth(QUOTE_CHARS) {
        None => format!("{value:?}"),
        Some((end, _)) => format!("{:?}… ({} bytes)", &value[..end], value.len()),
    }
}

/// A client-supplied value as `ErrorInfo.metadata` carries it: at most
/// [`QUOTE_CHARS`] characters, then `…`.
pub fn clip(value: &str) -> String {
    match value.char_indices().nth(QUOTE_CHARS) {
        None => value.to_owned(),
        Some((end, _)) => format!("{}…", &value[..end]),
    }
}

/// `text` cut at a character boundary to at most `max` bytes, `…` included.
fn bounded(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max - '…'.len_utf8();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

fn bounded_violations(mut violations: Vec<FieldViolation>) -> Vec<FieldViolation> {
    violations.truncate(MAX_VIOLATIONS);
    for v in &mut violations {
        v.field = bounded(std::mem::take(&mut v.field), MAX_FIELD_BYTES);
        v.description = bounded(std::mem::take(&mut v.description), MAX_DESCRIPTION_BYTES);
    }
    violations
}

/// Why a parser (conditions, hit conditions, globs, label selectors, log
/// message templates) refused its input. Limits are documented in
/// `docs/errors.md`; every refusal becomes a field violation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// The input is longer than `limit` bytes.
    TooLong {
        /// The limit, in bytes of UTF-8.
        limit: usize,
        /// The input's length.
        len: usize,
    },
    /// The input nests deeper than `limit` levels.
    TooDeep {
        /// The deepest nesting allowed.
        limit: usize,
    },
    /// The input has more than `limit` parts of some kind (e.g. expressions).
    TooMany {
        /// What is counted.
        what: &'static str,
        /// The most allowed.
        limit: usize,
    },
    /// The input is malformed; the text says what and where.
    Malformed(String),
}

impl ParseError {
    /// Refuses `text` when it is longer than `limit` bytes.
    pub fn check_len(text: &str, limit: usize) -> Result<(), ParseError> {
        if text.len() > limit {
            return Err(ParseError::TooLong {
                limit,
                len: text.len(),
            });
        }
        Ok(())
    }
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::TooLong { limit, len } => {
                write!(f, "{len} bytes is longer than the limit of {limit}")
            }
            ParseError::TooDeep { limit } => {
                write!(f, "nested deeper than the limit of {limit} levels")
            }
            ParseError::TooMany { what, limit } => {
                write!(f, "more than the limit of {limit} {what}")
            }
            ParseError::Malformed(text) => f.write_str(text),
        }
    }
}

impl std::error::Error for ParseError {}

impl From<String> for ParseError {
    fn from(text: String) -> Self {
        ParseError::Malformed(text)
    }
}

impl From<&str> for ParseError {
    fn from(text: &str) -> Self {
        ParseError::Malformed(text.to_owned())
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
        R::AdapterDied
        | R::ShuttingDown
        | R::StoreUnavailable
        | R::ReplicaUnavailable
        | R::ProbeNotReading => Code::Unavailable,
        R::UnsupportedByAdapter | R::NotImplemented => Code::Unimplemented,
        R::ProtocolError | R::Internal | R::Unspecified => Code::Internal,
        R::InvalidCommand | R::InvalidArgument | R::InvalidValue => Code::InvalidArgument,
        R::LimitExceeded => Code::ResourceExhausted,
        R::Unauthenticated | R::TokenExpired => Code::Unauthenticated,
        R::PermissionDenied => Code::PermissionDenied,
    }
}

/// `PERMISSION_DENIED` for `Code::PermissionDenied`: the names gRPC uses.
/// A table, not formatting: it is on the path of every audited call.
pub fn code_name(code: Code) -> &'static str {
    use Code as C;
    match code {
        C::Ok => "OK",
        C::Cancelled => "CANCELLED",
        C::Unknown => "UNKNOWN",
        C::InvalidArgument => "INVALID_ARGUMENT",
        C::DeadlineExceeded => "DEADLINE_EXCEEDED",
        C::NotFound => "NOT_FOUND",
        C::AlreadyExists => "ALREADY_EXISTS",
        C::PermissionDenied => "PERMISSION_DENIED",
        C::ResourceExhausted => "RESOURCE_EXHAUSTED",
        C::FailedPrecondition => "FAILED_PRECONDITION",
        C::Aborted => "ABORTED",
        C::OutOfRange => "OUT_OF_RANGE",
        C::Unimplemented => "UNIMPLEMENTED",
        C::Internal => "INTERNAL",
        C::Unavailable => "UNAVAILABLE",
        C::DataLoss => "DATA_LOSS",
        C::Unauthenticated => "UNAUTHENTICATED",
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, reason_str(self.reason))
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    /// An error from its parts as another replica sent them (the API crate
    /// reads them out of the status); nothing is bounded again here.
    pub fn from_parts(
        code: Code,
        reason: ErrorReason,
        message: String,
        metadata: HashMap<String, String>,
        violations: Vec<FieldViolation>,
    ) -> Self {
        Self {
            code,
            reason,
            message,
            metadata,
            violations,
        }
    }

    /// `ErrorInfo.metadata`.
    pub fn metadata(&self) -> &HashMap<String, String> {
        &self.metadata
    }

    /// The message as a status carries it: cut to a size any client takes.
    pub fn bounded_message(&self) -> String {
        bounded(self.message.clone(), MAX_MESSAGE_BYTES)
    }
}

/// Result alias for daemon operations.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// The error as a stream-local `error` event payload.
    pub fn to_stream_error(&self, key: &str) -> stepd_proto::v1::StreamError {
        stepd_proto::v1::StreamError {
            code: self.code as i32,
            reason: self.reason.into(),
            message: bounded(self.message.clone(), MAX_MESSAGE_BYTES),
            key: key.to_owned(),
            metadata: self.metadata.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_a_bounded_prefix() {
        assert_eq!(quote("bp-7"), "\"bp-7\"");
        let long = "é".repeat(100_000);
        let quoted = quote(&long);
        assert!(quoted.starts_with(&format!("\"{}\"…", "é".repeat(QUOTE_CHARS))));
        assert!(quoted.ends_with("(200000 bytes)"), "{quoted}");
        assert_eq!(clip("short"), "short");
        assert_eq!(clip(&long), format!("{}…", "é".repeat(QUOTE_CHARS)));
    }

    #[test]
    fn an_error_stays_small_whatever_it_was_given() {
        let long = "€".repeat(50_000);
        let err = ApiError::new(ErrorReason::SessionNotFound, long.clone())
            .with("session_id", long.clone())
            .with_violations(vec![FieldViolation::new(long.clone(), long.clone()); 100]);
        assert!(err.metadata["session_id"].len() <= MAX_METADATA_BYTES);
        assert!(err.to_stream_error("k").message.len() <= MAX_MESSAGE_BYTES);
        assert_eq!(err.violations.len(), MAX_VIOLATIONS);
        assert!(err.violations[0].description.len() <= MAX_DESCRIPTION_BYTES);
        assert!(err.violations[0].field.len() <= MAX_FIELD_BYTES);
        assert!(err.bounded_message().len() <= MAX_MESSAGE_BYTES);
    }
}
