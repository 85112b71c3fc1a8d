//! What a pause's span says when it opens: a name that reads as the pause
//! ("paused at tool_call transfer"), where and why it stopped, and for an
//! agent loop's points the OpenTelemetry GenAI attributes
//! (docs/observability.md, decision 71). Built only with export on.

use std::borrow::Cow;

use opentelemetry::{KeyValue, StringValue, Value};
use stepd_proto::v1::{Pause, PointInfo};

/// The longest point or function name a span's name repeats: span names
/// are an index in a trace store, a long one is only noise there.
const NAME_CHARS: usize = 64;

/// `paused at KIND NAME` for a probe point, `paused at FUNCTION` for a stop
/// in a known function, else `pause`.
pub fn name(pause: &Pause) -> Cow<'static, str> {
    let what = match (&pause.point, &pause.location) {
        (Some(point), _) if point.name.is_empty() => point.kind.clone(),
        (Some(point), _) => format!("{} {}", point.kind, short(&point.name)),
        (None, Some(location)) => short(&location.function).to_owned(),
        (None, None) => String::new(),
    };
    if what.is_empty() {
        Cow::Borrowed("pause")
    } else {
        Cow::Owned(format!("paused at {what}"))
    }
}

fn short(name: &str) -> &str {
    name.char_indices()
        .nth(NAME_CHARS)
        .map_or(name, |(end, _)| &name[..end])
}

/// The attributes of a pause's span at its start: the key, why, where.
pub fn attributes(pause: &Pause) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("stepd.pause.key", pause.key.clone()),
        KeyValue::new("stepd.session.id", pause.session_id.clone()),
        KeyValue::new(
            "stepd.pause.reason",
            stepd_proto::short_name(pause.reason().as_str_name()),
        ),
    ];
    if let Some(location) = &pause.location {
        if !location.path.is_empty() {
            attributes.push(KeyValue::new("code.file.path", location.path.clone()));
        }
        if location.line > 0 {
            attributes.push(KeyValue::new("code.line.number", i64::from(location.line)));
        }
        if !location.function.is_empty() {
            attributes.push(KeyValue::new(
                "code.function.name",
                location.function.clone(),
            ));
        }
    }
    if let Some(point) = &pause.point {
        attributes.push(KeyValue::new("stepd.point.name", point.name.clone()));
        attributes.push(KeyValue::new("stepd.point.kind", point.kind.clone()));
        attributes.extend(gen_ai(point));
    }
    if pause.thread_id != 0 {
        attributes.push(KeyValue::new("thread.id", pause.thread_id));
    }
    if !pause.breakpoint_ids.is_empty() {
        let ids: Vec<StringValue> = pause
            .breakpoint_ids
            .iter()
            .map(|id| StringValue::from(id.clone()))
            .collect();
        attributes.push(KeyValue::new(
            "stepd.breakpoint.ids",
            Value::Array(ids.into()),
        ));
    }
    attributes
}

/// GenAI semantic-convention attributes of an agent loop's point, by its
/// kind: tool points are `execute_tool` of the tool the payload's
/// `tool_name` or `tool` names (else the point's name, which the libraries'
/// examples make the tool's); model points are `chat` with the payload's
/// `model`; a turn's prompt and end are `invoke_agent`. Other kinds get none.
fn gen_ai(point: &PointInfo) -> Vec<KeyValue> {
    let text = |key: &str| payload_text(point, key);
    let (operation, more) = match point.kind.as_str() {
        "tool" | "tool_call" | "tool_result" | "tool_error" => {
            let tool = text("tool_name")
                .or_else(|| text("tool"))
                .or_else(|| (!point.name.is_empty()).then(|| point.name.clone()));
            ("execute_tool", tool.map(|t| ("gen_ai.tool.name", t)))
        }
        "model" | "model_request" => ("chat", text("model").map(|m| ("gen_ai.request.model", m))),
        "model_response" => ("chat", text("model").map(|m| ("gen_ai.response.model", m))),
        "prompt" | "turn_end" => ("invoke_agent", None),
        _ => return Vec::new(),
    };
    let mut attributes = vec![KeyValue::new("gen_ai.operation.name", operation)];
    attributes.extend(more.map(|(key, value)| KeyValue::new(key, value)));
    attributes
}

/// A string the payload object holds at `key` (not empty).
fn payload_text(point: &PointInfo, key: &str) -> Option<String> {
    use prost_types::value::Kind;
    let Some(Kind::StructValue(fields)) = point.payload.as_ref()?.kind.as_ref() else {
        return None;
    };
    match fields.fields.get(key)?.kind.as_ref()? {
        Kind::StringValue(s) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use stepd_proto::v1::{Location, Pause, PointInfo};

    use super::{gen_ai, name};

    fn point(kind: &str, name: &str, payload: serde_json::Value) -> PointInfo {
        PointInfo {
            kind: kind.into(),
            name: name.into(),
            payload: Some(crate::json::to_value(&payload)),
            ..Default::default()
        }
    }

    fn attrs(point: &PointInfo) -> Vec<(String, String)> {
        gen_ai(point)
            .into_iter()
            .map(|kv| (kv.key.to_string(), kv.value.to_string()))
            .collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn tool_points_name_their_tool() {
        let call = point("tool_call", "Bash", serde_json::json!({"cmd": "ls"}));
        assert_eq!(
            attrs(&call),
            pairs(&[
                ("gen_ai.operation.name", "execute_tool"),
                ("gen_ai.tool.name", "Bash")
            ])
        );
        let named = point("tool", "step", serde_json::json!({"tool": "grep", "x": 1}));
        assert_eq!(attrs(&named)[1].1, "grep");
        let both = point(
            "tool_result",
            "",
            serde_json::json!({"tool": "a", "tool_name": "b"}),
        );
        assert_eq!(attrs(&both)[1].1, "b");
        let anonymous = point("tool_error", "", serde_json::json!("text"));
        assert_eq!(
            attrs(&anonymous),
            pairs(&[("gen_ai.operation.name", "execute_tool")])
        );
    }

    #[test]
    fn model_points_name_their_model_from_the_payload() {
        let request = point(
            "model_request",
            "offline-small",
            serde_json::json!({"model": "m-1", "messages": []}),
        );
        assert_eq!(
            attrs(&request),
            pairs(&[
                ("gen_ai.operation.name", "chat"),
                ("gen_ai.request.model", "m-1")
            ])
        );
        let response = point("model_response", "x", serde_json::json!({"model": "m-2"}));
        assert_eq!(
            attrs(&response)[1],
            pairs(&[("gen_ai.response.model", "m-2")])[0]
        );
        // A model that is not a non-empty string is left out.
        let odd = point("model_request", "x", serde_json::json!({"model": 3}));
        assert_eq!(attrs(&odd), pairs(&[("gen_ai.operation.name", "chat")]));
    }

    #[test]
    fn other_points_carry_no_gen_ai_attributes() {
        assert!(attrs(&point("checkout", "pay", serde_json::json!({"model": "m"}))).is_empty());
        assert_eq!(
            attrs(&point("prompt", "user", serde_json::json!("hi"))),
            pairs(&[("gen_ai.operation.name", "invoke_agent")])
        );
    }

    #[test]
    fn names_read_as_the_pause() {
        let mut pause = Pause {
            point: Some(point("tool_call", "transfer", serde_json::Value::Null)),
            ..Default::default()
        };
        assert_eq!(name(&pause), "paused at tool_call transfer");
        pause.point = Some(point("turn_end", "", serde_json::Value::Null));
        assert_eq!(name(&pause), "paused at turn_end");
        pause.point = None;
        assert_eq!(name(&pause), "pause");
        pause.location = Some(Location {
            function: "main".into(),
            ..Default::default()
        });
        assert_eq!(name(&pause), "paused at main");
        pause.location.as_mut().unwrap().function = "é".repeat(100);
        assert_eq!(name(&pause), format!("paused at {}", "é".repeat(64)));
    }
}
