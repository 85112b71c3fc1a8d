//! Inspection of a session: threads, stacks, scopes, variables, evaluation and
//! output. These talk to the adapter directly, in parallel with execution;
//! handles are checked against the current stop so a stale one is refused.

use serde_json::{Value, json};
use stepd_proto::v1::{
    EvaluateContext, Frame, ReadOutputResponse, Scope, Thread, Variable, VariableFilter,
};

use super::{Shared, actor::dap_error, handles, stop};
use crate::error::{ApiError, ApiResult};

fn count(v: &Value) -> u32 {
    u32::try_from(v.as_u64().unwrap_or(0)).unwrap_or(u32::MAX)
}

impl Shared {
    fn variable(&self, epoch: u64, v: &Value, fallback_name: &str) -> Variable {
        let reference = v["variablesReference"].as_i64().unwrap_or(0);
        Variable {
            name: v["name"].as_str().unwrap_or(fallback_name).to_owned(),
            value: v["value"]
                .as_str()
                .or_else(|| v["result"].as_str())
                .unwrap_or_default()
                .to_owned(),
            r#type: v["type"].as_str().unwrap_or_default().to_owned(),
            variables_ref: if reference > 0 {
                handles::make(epoch, reference)
            } else {
                String::new()
            },
            named_variables: count(&v["namedVariables"]),
            indexed_variables: count(&v["indexedVariables"]),
            evaluate_name: v["evaluateName"].as_str().unwrap_or_default().to_owned(),
        }
    }

    /// Threads, marked with their pending pause.
    pub async fn threads(&self) -> ApiResult<Vec<Thread>> {
        let body = self
            .client()?
            .request("threads", json!({}))
            .await
            .map_err(|e| dap_error(&e))?;
        let stopped = self
            .stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Ok(body["threads"]
            .as_array()
            .map(|threads| {
                threads
                    .iter()
                    .map(|t| {
                        let id = t["id"].as_i64().unwrap_or(0);
                        let pause_key = stopped.get(&id).cloned().unwrap_or_default();
                        Thread {
                            id,
                            name: t["name"].as_str().unwrap_or_default().to_owned(),
                            stopped: !pause_key.is_empty(),
                            pause_key,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    fn require_stopped(&self, thread_id: i64) -> ApiResult<()> {
        let stopped = self.stopped.lock().unwrap_or_else(|e| e.into_inner());
        if stopped.contains_key(&thread_id) {
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
        let body = self
            .client()?
            .request("stackTrace", args)
            .await
            .map_err(|e| dap_error(&e))?;
        let frames: Vec<Frame> = stop::frames(&body, epoch);
        let total = body["totalFrames"]
            .as_u64()
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
                .request("scopes", json!({"frameId": frame_id}))
                .await
                .map_err(|e| dap_error(&e))?
        };
        let follows_frame = self.kind.scope_references_follow_frame();
        Ok(body["scopes"]
            .as_array()
            .map(|scopes| {
                scopes
                    .iter()
                    .map(|s| Scope {
                        name: s["name"].as_str().unwrap_or_default().to_owned(),
                        variables_ref: {
                            let reference = s["variablesReference"].as_i64().unwrap_or(0);
                            if follows_frame {
                                handles::make_scoped(epoch, reference, frame_id)
                            } else {
                                handles::make(epoch, reference)
                            }
                        },
                        named_variables: count(&s["namedVariables"]),
                        indexed_variables: count(&s["indexedVariables"]),
                        expensive: s["expensive"].as_bool().unwrap_or(false),
                    })
                    .collect()
            })
            .unwrap_or_default())
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
        let body = self
            .scoped_request(frame, reference, "variables", args)
            .await?;
        Ok(body["variables"]
            .as_array()
            .map(|vars| vars.iter().map(|v| self.variable(epoch, v, "")).collect())
            .unwrap_or_default())
    }

    /// Sends a request about a variables reference. For a scope's handle
    /// that names its frame, that frame's scopes are asked for first, under
    /// the selection lock, so the reference means that frame's scope and not
    /// the last frame another request looked at.
    async fn scoped_request(
        &self,
        frame: Option<i64>,
        reference: i64,
        command: &str,
        args: Value,
    ) -> ApiResult<Value> {
        let client = self.client()?;
        let Some(frame) = frame else {
            return client
                .request(command, args)
                .await
                .map_err(|e| dap_error(&e));
        };
        let _selection = self.scope_selection.lock().await;
        let scopes = client
            .request("scopes", json!({"frameId": frame}))
            .await
            .map_err(|e| dap_error(&e))?;
        let still_named = scopes["scopes"].as_array().is_some_and(|scopes| {
            scopes
                .iter()
                .any(|s| s["variablesReference"].as_i64() == Some(reference))
        });
        if !still_named {
            return Err(ApiError::new(
                stepd_proto::v1::ErrorReason::StaleHandle,
                format!("frame {frame} has no scope with reference {reference} any more"),
            )
            .with("variables_ref", reference.to_string()));
        }
        client
            .request(command, args)
            .await
            .map_err(|e| dap_error(&e))
    }

    /// Assigns a child of a container.
    pub async fn set_variable(
        &self,
        reference: &str,
        name: &str,
        value: &str,
    ) -> ApiResult<Variable> {
        self.require("supportsSetVariable", "setting variables")?;
        let epoch = self.epoch();
        let (reference, frame) = handles::resolve_scoped(reference, "variables_ref", epoch)?;
        let args = json!({"variablesReference": reference, "name": name, "value": value});
        let body = self
            .scoped_request(frame, reference, "setVariable", args)
            .await?;
        Ok(self.variable(epoch, &body, name))
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
                self.require("supportsEvaluateForHovers", "hover evaluation")?;
                "hover"
            }
            EvaluateContext::Clipboard => {
                self.require("supportsClipboardContext", "clipboard evaluation")?;
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
        let body = self
            .client()?
            .request("evaluate", args)
            .await
            .map_err(|e| dap_error(&e))?;
        Ok(self.variable(epoch, &body, expression))
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
        crate::session::output::read_response(&self.output, after, max_bytes, categories)
    }
}
