//! A DAP session's inspection paths, as the session core asks for them.

use std::sync::Arc;

use stepd_proto::v1::{
    EvaluateContext, Frame, Pause, ReadOutputResponse, Scope, SessionKind, Thread, Variable,
    VariableFilter,
};

use super::{Shared, values};
use stepd_core::{
    inspector::value::Node,
    session::{Fut, PauseTarget, SessionPort},
};

/// The port of one DAP session.
pub struct DapPort(pub Arc<Shared>);

impl SessionPort for DapPort {
    fn id(&self) -> &str {
        &self.0.id
    }

    fn kind(&self) -> SessionKind {
        SessionKind::Dap
    }

    fn threads(&self) -> Fut<'_, Vec<Thread>> {
        Box::pin(self.0.threads())
    }

    fn stack_trace(&self, thread_id: i64, start: u32, levels: u32) -> Fut<'_, (Vec<Frame>, u32)> {
        Box::pin(self.0.stack_trace(thread_id, start, levels))
    }

    fn scopes<'a>(&'a self, frame: &'a str) -> Fut<'a, Vec<Scope>> {
        Box::pin(self.0.scopes(frame))
    }

    fn variables<'a>(
        &'a self,
        reference: &'a str,
        filter: VariableFilter,
        start: u32,
        count: u32,
    ) -> Fut<'a, Vec<Variable>> {
        Box::pin(self.0.variables(reference, filter, start, count))
    }

    fn set_variable<'a>(
        &'a self,
        reference: &'a str,
        name: &'a str,
        value: &'a str,
    ) -> Fut<'a, Variable> {
        Box::pin(self.0.set_variable(reference, name, value))
    }

    fn evaluate<'a>(
        &'a self,
        expression: &'a str,
        frame: &'a str,
        context: EvaluateContext,
    ) -> Fut<'a, Variable> {
        Box::pin(self.0.evaluate(expression, frame, context))
    }

    fn read_output(&self, after: u64, max_bytes: u32, categories: &[String]) -> ReadOutputResponse {
        self.0.read_output(after, max_bytes, categories)
    }

    fn pause_node<'a>(
        &'a self,
        pause: &'a Pause,
        target: &'a PauseTarget,
    ) -> Fut<'a, Arc<dyn Node>> {
        Box::pin(values::pause_node(&self.0, pause, target))
    }

    fn handle_node<'a>(&'a self, handle: &'a str) -> Fut<'a, Arc<dyn Node>> {
        Box::pin(async move { values::handle(&self.0, handle) })
    }

    fn expression_node<'a>(&'a self, frame: &'a str, code: &'a str) -> Fut<'a, Arc<dyn Node>> {
        Box::pin(values::expression(&self.0, frame, code))
    }

    fn exception_node(&self, thread_id: i64) -> Fut<'_, Arc<dyn Node>> {
        Box::pin(values::exception(&self.0, thread_id))
    }
}
