//! Inspection of a session: threads, stacks, scopes, variables, evaluation and
//! output. These talk to the adapter directly, in parallel with execution;
//! handles are checked against the current stop so a stale one is refused.

use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use stepd_proto::v1::{
    EvaluateContext, Frame, ReadOutputResponse, Scope, Thread, Variable, VariableFilter,
};

use super::{Shared, dap_error, handles, stop};
use crate::capability::Capability;
use crate::messages::{
    EvaluateResponse, ScopesResponse, SetVariableResponse, StackTraceResponse, ThreadsResponse,
    VariableInfo, VariablesResponse,
};
use stepd_core::error::{ApiError, ApiResult};

fn count(n: Option<u64>) -> u32 {
    n.map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
}

impl Shared {
    fn variable(&self, epoch: u64, v: VariableInfo) -> Variable {
        let mut variable = Variable {
            name: v.name,
            value: v.value,
            r#type: v.type_name.unwrap_or_default(),
            variables_ref: if v.variables_reference > 0 {
                handles::make(epoch, v.variables_reference)
            } else {
                String::new()
            },
            named_variables: count(v.named_variables),
            indexed_variables: count(v.indexed_variables),
            evaluate_name: v.evaluate_name.unwrap_or_default(),
        };
        self.redactor.variable(&mut variable);
        variable
    }

    /// Threads, marked with their pending pause.
    pub async fn threads(&self) -> ApiResult<Vec<Thread>> {
        let body: ThreadsResponse = self
            .client()?
            .call("threads", json!({}))
            .await
            .map_err(|e| dap_error(&e))?;
        let stopped = self
            .stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Ok(body
            .threads
            .into_iter()
            .map(|t| {
                let pause_key = stopped.get(&t.id).cloned().unwrap_or_default();
                Thread {
                    id: t.id,
                    name: t.name,
                    stopped: !pause_key.is_empty() || self.is_stopped(t.id),
                    pause_key,
                }
            })
            .collect())
    }

    fn require_stopped(&self, thread_id: i64) -> ApiResult<()> {
        if self.is_stopped(thread_id) {
            Ok(())
        } else {
            Err(ApiError::new(
                stepd_proto::v1::ErrorReason::NotStopped,
                format!("thread {thread_id} is not stopped"),
            )
            .with("thread_id", thread_id.to_string()))
        }
    }

    /// The thread a request means: `thread_id`, or for 0 the thread of the
    /// latest pause, as Step and Continue read 0.
    fn thread_or_latest(&self, thread_id: i64) -> ApiResult<i64> {
        if thread_id != 0 {
            return Ok(thread_id);
        }
        if let Some((thread, _)) = *self.latest_frame.lock().unwrap_or_else(|e| e.into_inner()) {
            return Ok(thread);
        }
        // The latest stop's thread moved on: pause keys carry a UUIDv7, so
        // the greatest key is the latest pause still pending.
        self.stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .max_by(|a, b| a.1.cmp(b.1))
            .map(|(thread, _)| *thread)
            .ok_or_else(|| {
                ApiError::new(
                    stepd_proto::v1::ErrorReason::NotStopped,
                    "no thread is stopped (thread_id 0 means the latest pause's thread)",
                )
                .with("thread_id", "0")
            })
    }

    /// Frames of a stopped thread (0 = the latest pause's).
    pub async fn stack_trace(
        &self,
        thread_id: i64,
        start: u32,
        levels: u32,
    ) -> ApiResult<(Vec<Frame>, u32)> {
        let thread_id = self.thread_or_latest(thread_id)?;
        self.require_stopped(thread_id)?;
        let epoch = self.epoch();
        let mut args = json!({"threadId": thread_id, "startFrame": start});
        if levels > 0 {
            args["levels"] = json!(levels);
        }
        let body: StackTraceResponse = self
            .client()?
            .call("stackTrace", args)
            .await
            .map_err(|e| dap_error(&e))?;
        let frames: Vec<Frame> = stop::frames(self.kind, &body, epoch);
        let total = body
            .total_frames
            .map(|t| u32::try_from(t).unwrap_or(u32::MAX))
            .unwrap_or(start + frames.len() as u32);
        Ok((frames, total))
    }

    /// Scopes of a frame.
    pub async fn scopes(&self, frame: &str) -> ApiResult<Vec<Scope>> {
        let epoch = self.epoch();
        let frame_id = handles::resolve(frame, "frame_id", epoch)?;
        let body = {
            let _selection = self.scope_selection.lock().await;
            self.client()?
                .call::<ScopesResponse>("scopes", json!({"frameId": frame_id}))
                .await
                .map_err(|e| dap_error(&e))?
        };
        let follows_frame = self.kind.scope_references_follow_frame();
        Ok(body
            .scopes
            .into_iter()
            .map(|s| Scope {
                name: s.name,
                variables_ref: if follows_frame {
                    handles::make_scoped(epoch, s.variables_reference, frame_id)
                } else {
                    handles::make(epoch, s.variables_reference)
                },
                named_variables: count(s.named_variables),
                indexed_variables: count(s.indexed_variables),
                expensive: s.expensive,
            })
            .collect())
    }

    /// Children of a container, paged with start/count.
    pub async fn variables(
        &self,
        reference: &str,
        filter: VariableFilter,
        start: u32,
        count_: u32,
    ) -> ApiResult<Vec<Variable>> {
        let epoch = self.epoch();
        let (reference, frame) = handles::resolve_scoped(reference, "variables_ref", epoch)?;
        let mut args = json!({"variablesReference": reference});
        match filter {
            VariableFilter::Indexed => args["filter"] = json!("indexed"),
            VariableFilter::Named => args["filter"] = json!("named"),
            VariableFilter::Unspecified => {}
        }
        if start > 0 || count_ > 0 {
            args["start"] = json!(start);
            args["count"] = json!(count_);
        }
        let body: VariablesResponse = self
            .scoped_request(frame, reference, "variables", args)
            .await?;
        Ok(body
            .variables
            .into_iter()
            .map(|v| self.variable(epoch, v))
            .collect())
    }

    /// Sends a request about a variables reference. For a scope's handle
    /// that names its frame, that frame's scopes are asked for first, under
    /// the selection lock, so the reference means that frame's scope and not
    /// the last frame another request looked at.
    async fn scoped_request<T: DeserializeOwned>(
        &self,
        frame: Option<i64>,
        reference: i64,
        command: &str,
        args: Value,
    ) -> ApiResult<T> {
        let client = self.client()?;
        let Some(frame) = frame else {
            return client.call(command, args).await.map_err(|e| dap_error(&e));
        };
        let _selection = self.scope_selection.lock().await;
        let scopes: ScopesResponse = client
            .call("scopes", json!({"frameId": frame}))
            .await
            .map_err(|e| dap_error(&e))?;
        let still_named = scopes
            .scopes
            .iter()
            .any(|s| s.variables_reference == reference);
        if !still_named {
            return Err(ApiError::new(
                stepd_proto::v1::ErrorReason::StaleHandle,
                format!("frame {frame} has no scope with reference {reference} any more"),
            )
            .with("variables_ref", reference.to_string()));
        }
        client.call(command, args).await.map_err(|e| dap_error(&e))
    }

    /// Assigns a child of a container.
    pub async fn set_variable(
        &self,
        reference: &str,
        name: &str,
        value: &str,
    ) -> ApiResult<Variable> {
        self.require(Capability::SetVariable, "setting variables")?;
        let epoch = self.epoch();
        let (reference, frame) = handles::resolve_scoped(reference, "variables_ref", epoch)?;
        let args = json!({"variablesReference": reference, "name": name, "value": value});
        let body: SetVariableResponse = self
            .scoped_request(frame, reference, "setVariable", args)
            .await?;
        Ok(self.variable(epoch, body.into_variable(name)))
    }

    /// Evaluates an expression, in a frame when given.
    pub async fn evaluate(
        &self,
        expression: &str,
        frame: &str,
        context: EvaluateContext,
    ) -> ApiResult<Variable> {
        let epoch = self.epoch();
        let context = match context {
            EvaluateContext::Hover => {
                self.require(Capability::EvaluateForHovers, "hover evaluation")?;
                "hover"
            }
            EvaluateContext::Clipboard => {
                self.require(Capability::ClipboardContext, "clipboard evaluation")?;
                "clipboard"
            }
            EvaluateContext::Watch => "watch",
            EvaluateContext::Repl => "repl",
            EvaluateContext::Unspecified => self.default_eval_context(),
        };
        let mut args = json!({"expression": expression, "context": context});
        if !frame.is_empty() {
            args["frameId"] = json!(handles::resolve(frame, "frame_id", epoch)?);
        } else if let Some((_, latest)) =
            *self.latest_frame.lock().unwrap_or_else(|e| e.into_inner())
        {
            // Without a frame, evaluate where the program last stopped.
            args["frameId"] = json!(latest);
        }
        let body: EvaluateResponse = self
            .client()?
            .call("evaluate", args)
            .await
            .map_err(|e| dap_error(&e))?;
        Ok(self.variable(epoch, body.into_variable(expression)))
    }

    /// The context of an evaluation that names none (`AdapterKind::default_eval_context`).
    pub fn default_eval_context(&self) -> &'static str {
        self.kind.default_eval_context()
    }

    /// Reads captured output without draining it.
    pub fn read_output(
        &self,
        after: u64,
        max_bytes: u32,
        categories: &[String],
    ) -> ReadOutputResponse {
        stepd_core::session::output::read_response(&self.output, after, max_bytes, categories)
    }
}
