//! The audit log: one line per mutating call, at info under the tracing
//! target `stepd::audit` — who (identity, role, how), which method, what it
//! was about (a session, a breakpoint, a pause), the client's own name for
//! itself, and the gRPC result code.

use std::{
    fmt::Display,
    sync::{Arc, Mutex},
};

use super::Identity;
use stepd_core::error::code_name;

/// The tracing target of audit lines.
pub const TARGET: &str = "stepd::audit";

/// Where a handler writes what its call was about; the layer puts one in
/// the extensions of every audited request and reads it when writing the
/// line.
#[derive(Clone, Default)]
pub struct Note(Arc<Mutex<String>>);

impl Note {
    /// The note of `request`, or one that goes nowhere when the request is
    /// not audited.
    pub fn of<T>(request: &tonic::Request<T>) -> Self {
        request
            .extensions()
            .get::<Note>()
            .cloned()
            .unwrap_or_default()
    }

    /// Records `what=id` (e.g. `session=…`, `breakpoint=bp-3`); several
    /// calls add to it.
    pub fn set(&self, what: &str, id: impl Display) {
        let mut text = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !text.is_empty() {
            text.push(' ');
        }
        let id = id.to_string();
        text.push_str(what);
        text.push('=');
        text.push_str(&stepd_core::error::clip(&id));
    }

    fn take(&self) -> String {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// What the layer knows of an audited call before it is answered.
pub struct Pending {
    /// The caller, when authenticated.
    pub who: Option<Arc<Identity>>,
    /// `package.Service/Method`.
    pub method: String,
    /// The handler's note.
    pub note: Note,
    /// The `x-stepd-client` header, if any.
    pub client: String,
}

impl Pending {
    /// Writes the line with the call's result code.
    pub fn finish(self, code: tonic::Code) {
        write(
            self.who.as_deref(),
            &self.method,
            &self.note.take(),
            &self.client,
            code,
        );
    }
}

/// Writes one audit line.
pub fn write(who: Option<&Identity>, method: &str, target: &str, client: &str, code: tonic::Code) {
    let (identity, role, how) = match who {
        Some(id) => (id.name.as_str(), id.role.as_str(), id.how.as_str()),
        None => ("-", "-", "-"),
    };
    tracing::info!(
        target: TARGET,
        identity,
        role,
        how,
        method,
        about = target,
        client,
        code = %code_name(stepd_rpc::status::core_code(code)),
        "audit"
    );
}
