//! Where an inspector starts: an `InspectSource` resolved, through the
//! session it names, to a root value the inspector can navigate.

use std::sync::Arc;

use stepd_proto::v1::{ErrorReason, InspectSource, PauseReason, inspect_source::Source};

use super::{PauseTarget, Sessions, pause::PauseRegistry};
use crate::{
    error::{ApiError, ApiResult},
    inspector::{Inspectors, value::Node},
};

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
            let pause = pauses.get(key).ok_or_else(|| pauses.gone(key))?;
            let target = if matches!(source, Source::PauseValue(_)) {
                PauseTarget::Value
            } else {
                PauseTarget::Locals
            };
            let port = sessions.get(&pause.session_id)?.port;
            let node = port.pause_node(&pause, &target).await?;
            Ok((pause.session_id, node))
        }
        Source::VariablesRef(handle) => {
            session_required(session_id)?;
            let port = sessions.get(session_id)?.port;
            Ok((session_id.to_owned(), port.handle_node(handle).await?))
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
            let port = sessions.get(sid)?.port;
            let node = port.expression_node(&e.frame_id, &e.code).await?;
            Ok((sid.to_owned(), node))
        }
        Source::LastExceptionSessionId(sid) => {
            let port = sessions.get(sid)?.port;
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
            let node = port.exception_node(pause.thread_id).await?;
            Ok((sid.clone(), node))
        }
        Source::TapSeq(seq) => inspectors.tapped(*seq),
    }
}
