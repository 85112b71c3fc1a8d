//! What the API may ask of a session besides its actor's commands: the
//! inspection paths (threads, stacks, variables, evaluation, output) and the
//! values an inspector opens. They run beside the actor, in parallel with
//! execution. Each kind of session implements [`SessionPort`]; a request a
//! kind cannot serve is refused with UNSUPPORTED_BY_ADAPTER by default.

use std::{future::Future, pin::Pin, sync::Arc};

use stepd_proto::v1::{
    ErrorReason, EvaluateContext, Frame, Pause, ReadOutputResponse, Scope, SessionKind, Thread,
    Variable, VariableFilter,
};

use crate::{
    error::{ApiError, ApiResult},
    inspector::value::Node,
};

/// A future a port returns (ports are trait objects, so no `async fn`).
pub type Fut<'a, T> = Pin<Box<dyn Future<Output = ApiResult<T>> + Send + 'a>>;

/// What of a pause to inspect.
#[derive(Debug, Clone)]
pub enum PauseTarget {
    /// The value paused on: a probe's payload; for DAP the exception of an
    /// exception stop, else the paused frame (its scopes).
    Value,
    /// The locals of the paused frame.
    Locals,
    /// An expression evaluated in the paused frame.
    Expression(String),
}

fn unsupported<'a, T: Send + 'a>(session_id: &str, what: &str) -> Fut<'a, T> {
    let error = ApiError::new(
        ErrorReason::UnsupportedByAdapter,
        format!(
            "session {session_id} has no debug adapter: probe sessions have no {what} (use EVAL \
             at a hold)"
        ),
    )
    .with("session_id", session_id);
    Box::pin(async move { Err(error) })
}

/// A session's inspection paths, implemented by each kind.
pub trait SessionPort: Send + Sync {
    /// The session id.
    fn id(&self) -> &str;

    /// DAP or probe.
    fn kind(&self) -> SessionKind;

    /// Threads, each marked with its pending pause.
    fn threads(&self) -> Fut<'_, Vec<Thread>> {
        unsupported(self.id(), "threads")
    }

    /// Frames of a thread (0 = the thread of the latest pause), and how many there are.
    fn stack_trace(&self, thread_id: i64, start: u32, levels: u32) -> Fut<'_, (Vec<Frame>, u32)> {
        let _ = (thread_id, start, levels);
        unsupported(self.id(), "stacks")
    }

    /// Scopes of a frame.
    fn scopes<'a>(&'a self, frame: &'a str) -> Fut<'a, Vec<Scope>> {
        let _ = frame;
        unsupported(self.id(), "scopes")
    }

    /// Children of a variable handle, paged.
    fn variables<'a>(
        &'a self,
        reference: &'a str,
        filter: VariableFilter,
        start: u32,
        count: u32,
    ) -> Fut<'a, Vec<Variable>> {
        let _ = (reference, filter, start, count);
        unsupported(self.id(), "variables")
    }

    /// Sets a variable under a handle.
    fn set_variable<'a>(
        &'a self,
        reference: &'a str,
        name: &'a str,
        value: &'a str,
    ) -> Fut<'a, Variable> {
        let _ = (reference, name, value);
        unsupported(self.id(), "variables")
    }

    /// Evaluates an expression in a frame.
    fn evaluate<'a>(
        &'a self,
        expression: &'a str,
        frame: &'a str,
        context: EvaluateContext,
    ) -> Fut<'a, Variable> {
        let _ = (expression, frame, context);
        unsupported(self.id(), "frames to evaluate in")
    }

    /// Captured output after `after`, without draining it.
    fn read_output(&self, after: u64, max_bytes: u32, categories: &[String]) -> ReadOutputResponse {
        let _ = (after, max_bytes, categories);
        ReadOutputResponse::default()
    }

    /// The root value of a pause's value, locals or an expression in its frame.
    fn pause_node<'a>(
        &'a self,
        pause: &'a Pause,
        target: &'a PauseTarget,
    ) -> Fut<'a, Arc<dyn Node>>;

    /// The value behind a variable handle.
    fn handle_node<'a>(&'a self, handle: &'a str) -> Fut<'a, Arc<dyn Node>> {
        let _ = handle;
        unsupported(self.id(), "variable handles")
    }

    /// An expression evaluated in a frame, as a value.
    fn expression_node<'a>(&'a self, frame: &'a str, code: &'a str) -> Fut<'a, Arc<dyn Node>> {
        let _ = (frame, code);
        unsupported(self.id(), "frames to evaluate in")
    }

    /// The exception a thread stopped on, as a value.
    fn exception_node(&self, thread_id: i64) -> Fut<'_, Arc<dyn Node>> {
        let _ = thread_id;
        unsupported(self.id(), "exceptions to inspect")
    }
}
