//! Where an inspector starts: `InspectSource` resolved to a root value.

use std::sync::Arc;

use prost_types::{Struct, Value, value::Kind};
use stepd_proto::v1::{ErrorReason, InspectSource, Pause, PauseReason, inspect_source::Source};

use super::{
    Inspectors, dap_source,
    json_source::JsonNode,
    value::{Node, StaticNode},
};
use crate::{
    error::{ApiError, ApiResult},
    pause::PauseRegistry,
    session::Sessions,
};

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

fn pause_not_found(key: &str) -> ApiError {
    ApiError::new(
        ErrorReason::PauseNotFound,
        format!("no pending pause {key:?}"),
    )
    .with("key", key)
}

/// The root value of a pause's value, locals or an expression in its frame.
pub async fn pause_node(
    sessions: &Sessions,
    pause: &Pause,
    target: &PauseTarget,
) -> ApiResult<Arc<dyn Node>> {
    if let Some(point) = &pause.point {
        // A probe pause: its payload and locals are plain values.
        return match target {
            PauseTarget::Value => Ok(Arc::new(JsonNode::new(
                point.payload.clone().unwrap_or_default(),
            ))),
            PauseTarget::Locals => Ok(Arc::new(JsonNode::new(Value {
                kind: Some(Kind::StructValue(Struct {
                    fields: pause
                        .locals
                        .iter()
                        .map(|l| {
                            let text = l.value.as_ref().map(|v| v.text.clone());
                            (
                                l.name.clone(),
                                Value {
                                    kind: Some(Kind::StringValue(text.unwrap_or_default())),
                                },
                            )
                        })
                        .collect(),
                })),
            }))),
            PauseTarget::Expression(_) => Err(ApiError::new(
                ErrorReason::UnsupportedByAdapter,
                "this probe declares no evaluator",
            )),
        };
    }
    let shared = sessions.get(&pause.session_id)?.shared;
    let (frames, _) = shared.stack_trace(pause.thread_id, 0, 1).await?;
    let frame = frames.first().ok_or_else(|| {
        ApiError::new(
            ErrorReason::NotStopped,
            format!("thread {} has no frames", pause.thread_id),
        )
    })?;
    match target {
        PauseTarget::Locals => dap_source::locals(&shared, &frame.id).await,
        PauseTarget::Expression(code) => dap_source::expression(&shared, &frame.id, code).await,
        PauseTarget::Value => {
            if pause.reason == PauseReason::Exception as i32
                && shared.supports("supportsExceptionInfoRequest")
            {
                return dap_source::exception(&shared, pause.thread_id).await;
            }
            if let Some(shown) = pause.debug_value.as_ref().filter(|v| !v.text.is_empty()) {
                // The pause shows a value (an EVAL result): that is what it is on.
                let epoch = shared.epoch();
                return Ok(Arc::new(StaticNode {
                    repr: shown.text.clone(),
                    type_name: shown.r#type.clone(),
                    children: Vec::new(),
                    guard: Some(dap_source::guard(&shared, epoch)),
                }));
            }
            let at = frame
                .location
                .as_ref()
                .map(|l| format!("{} at {}:{}", frame.name, l.path, l.line))
                .unwrap_or_else(|| frame.name.clone());
            dap_source::frame(&shared, &frame.id, at).await
        }
    }
}

/// A pending pause by key.
pub fn pending(pauses: &PauseRegistry, key: &str) -> ApiResult<Pause> {
    pauses
        .list(None)
        .into_iter()
        .find(|p| p.key == key)
        .ok_or_else(|| pause_not_found(key))
}

fn session_required(session_id: &str) -> ApiResult<()> {
    if session_id.is_empty() {
        Err(ApiError::invalid_field(
            "session_id",
            "the session the value belongs to is required",
        ))
    } else {
        Ok(())
    }
}

/// Resolves a source: (its session, the root value).
pub async fn resolve(
    sessions: &Sessions,
    pauses: &PauseRegistry,
    inspectors: &Inspectors,
    session_id: &str,
    source: Option<&InspectSource>,
) -> ApiResult<(String, Arc<dyn Node>)> {
    let source = source
        .and_then(|s| s.source.as_ref())
        .ok_or_else(|| ApiError::invalid_field("source", "a source is required"))?;
    match source {
        Source::PauseValue(key) | Source::PauseLocals(key) => {
            let pause = pending(pauses, key)?;
            let target = if matches!(source, Source::PauseValue(_)) {
                PauseTarget::Value
            } else {
                PauseTarget::Locals
            };
            let node = pause_node(sessions, &pause, &target).await?;
            Ok((pause.session_id, node))
        }
        Source::VariablesRef(handle) => {
            session_required(session_id)?;
            let shared = sessions.get(session_id)?.shared;
            Ok((session_id.to_owned(), dap_source::handle(&shared, handle)?))
        }
        Source::Expression(e) => {
            let sid = if e.session_id.is_empty() {
                session_id
            } else {
                &e.session_id
            };
            session_required(sid)?;
            if e.code.trim().is_empty() {
                return Err(ApiError::invalid_field(
                    "source.expression.code",
                    "an expression is required",
                ));
            }
            let shared = sessions.get(sid)?.shared;
            let node = dap_source::expression(&shared, &e.frame_id, &e.code).await?;
            Ok((sid.to_owned(), node))
        }
        Source::LastExceptionSessionId(sid) => {
            let shared = sessions.get(sid)?.shared;
            let pause = pauses
                .list(Some(sid))
                .into_iter()
                .rfind(|p| p.reason == PauseReason::Exception as i32)
                .ok_or_else(|| {
                    ApiError::new(
                        ErrorReason::NotStopped,
                        format!("session {sid} is not stopped on an exception"),
                    )
                    .with("session_id", sid.clone())
                })?;
            let node = dap_source::exception(&shared, pause.thread_id).await?;
            Ok((sid.clone(), node))
        }
        Source::TapSeq(seq) => inspectors.tapped(*seq),
    }
}
