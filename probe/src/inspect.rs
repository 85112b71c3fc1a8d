//! What the inspector opens at a probe hold: the held payload and the
//! reported locals, as plain values.

use std::sync::Arc;

use prost_types::{Struct, Value, value::Kind};
use stepd_proto::v1::{ErrorReason, Pause};

use stepd_core::{
    error::{ApiError, ApiResult},
    inspector::{json_source::JsonNode, value::Node},
    session::PauseTarget,
};

/// The root value of a hold's payload or locals.
pub fn pause_node(pause: &Pause, target: &PauseTarget) -> ApiResult<Arc<dyn Node>> {
    let payload = pause.point.as_ref().and_then(|p| p.payload.clone());
    match target {
        PauseTarget::Value => Ok(Arc::new(JsonNode::new(payload.unwrap_or_default()))),
        PauseTarget::Locals => Ok(Arc::new(JsonNode::new(Value {
            kind: Some(Kind::StructValue(Struct {
                fields: pause
                    .locals
                    .iter()
                    .map(|l| {
                        let text = l.value.as_ref().map(|v| v.text.clone());
                        let text = Value {
                            kind: Some(Kind::StringValue(text.unwrap_or_default())),
                        };
                        (l.name.clone(), text)
                    })
                    .collect(),
            })),
        }))),
        PauseTarget::Expression(_) => Err(ApiError::new(
            ErrorReason::UnsupportedByAdapter,
            "a probe evaluates with EVAL at a hold; it has no frames to inspect an expression in",
        )),
    }
}
