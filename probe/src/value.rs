//! Probe values: printing `google.protobuf.Value` trees for display, and
//! checking an INJECT value against the schema or type hint the probe sent.

use prost_types::{Value, value::Kind};
use serde_json::Value as Json;
use stepd_proto::v1::{ErrorReason, PointInfo};

use stepd_core::error::FieldViolation;

use stepd_core::{
    error::{ApiError, ApiResult},
    json::{from_struct as struct_to_json, from_value as value_to_json},
};

/// A value printed as compact JSON.
pub fn print(value: &Value) -> String {
    match &value.kind {
        Some(Kind::StringValue(s)) => s.clone(),
        _ => value_to_json(value).to_string(),
    }
}

/// Where an INJECT value sits in a `SendDebugInput` request.
const FIELD: &str = "command.inject.value";

/// The reason each field violation carries.
const VIOLATION_REASON: &str = "INVALID_VALUE";

/// Refuses a replacement that does not fit the point.
pub fn check(value: &Value, point: &PointInfo) -> ApiResult<()> {
    if !point.editable {
        return Err(ApiError::new(
            ErrorReason::InvalidCommand,
            "this point's value is not editable",
        ));
    }
    let json = value_to_json(value);
    if let Some(schema) = &point.schema {
        return schema_check(&json, &struct_to_json(schema)).map_err(invalid);
    }
    if !point.type_hint.is_empty() {
        return hint_check(&json, &point.type_hint)
            .map_err(|message| invalid(vec![violation(FIELD.to_owned(), message)]));
    }
    Ok(())
}

/// `INVALID_VALUE`, with every violation in the `BadRequest` detail.
fn invalid(violations: Vec<FieldViolation>) -> ApiError {
    let message = violations
        .iter()
        .map(|v| format!("{}: {}", v.field, v.description))
        .collect::<Vec<_>>()
        .join("; ");
    ApiError::new(ErrorReason::InvalidValue, message)
        .with("field", FIELD)
        .with_violations(violations)
}

fn violation(field: String, description: String) -> FieldViolation {
    FieldViolation {
        field,
        description,
        reason: VIOLATION_REASON.to_owned(),
    }
}

/// Checks `v` against a JSON Schema with the `jsonschema` crate; each
/// violation names the field it is about, below `command.inject.value`.
/// Formats are asserted (they are only annotations by default), and a
/// schema that does not compile refuses every value rather than none.
fn schema_check(v: &Json, schema: &Json) -> Result<(), Vec<FieldViolation>> {
    let (v, schema) = (whole_numbers(v), whole_numbers(schema));
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .map_err(|err| {
            vec![violation(
                FIELD.to_owned(),
                format!("the point's schema is not a usable JSON Schema: {err}"),
            )]
        })?;
    let violations: Vec<FieldViolation> = validator
        .iter_errors(&v)
        .map(|err| violation(field_path(err.instance_path()), err.to_string()))
        .collect();
    if violations.is_empty() {
        Ok(())
    } else {
        Err(violations)
    }
}

/// `command.inject.value.args[0].cmd` for the instance location `/args/0/cmd`.
fn field_path(location: &jsonschema::paths::Location) -> String {
    use jsonschema::paths::LocationSegment;
    let mut field = FIELD.to_owned();
    for segment in location.segments() {
        match segment {
            LocationSegment::Index(i) => field.push_str(&format!("[{i}]")),
            LocationSegment::Property(name) => {
                let plain = name
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_alphabetic() || c == '_')
                    && name.chars().all(|c| c.is_alphanumeric() || c == '_');
                if plain {
                    field.push('.');
                    field.push_str(&name);
                } else {
                    field.push_str(&format!("[{}]", Json::String(name.into_owned())));
                }
            }
        }
    }
    field
}

/// `google.protobuf.Value` has only doubles, so `3` arrives as `3.0`; whole
/// numbers become integers again, or `"type": "integer"` and keywords such as
/// `minLength: 3` would not read as written.
fn whole_numbers(v: &Json) -> Json {
    match v {
        Json::Number(n) => match n.as_f64() {
            Some(f) if !n.is_i64() && !n.is_u64() && f.fract() == 0.0 && f.abs() < 9.0e15 => {
                Json::from(f as i64)
            }
            _ => v.clone(),
        },
        Json::Array(items) => Json::Array(items.iter().map(whole_numbers).collect()),
        Json::Object(map) => Json::Object(
            map.iter()
                .map(|(k, item)| (k.clone(), whole_numbers(item)))
                .collect(),
        ),
        _ => v.clone(),
    }
}

fn type_name(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "boolean",
        Json::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => "integer",
        Json::Number(_) => "number",
        Json::String(_) => "string",
        Json::Array(_) => "array",
        Json::Object(_) => "object",
    }
}

fn is_type(v: &Json, wanted: &str) -> bool {
    let actual = type_name(v);
    actual == wanted || (wanted == "number" && actual == "integer")
}

/// Python and JSON type names: str/string, int/integer, float/number,
/// bool/boolean, dict/object, list/array, None/null.
fn hint_check(v: &Json, hint: &str) -> Result<(), String> {
    let wanted = match hint {
        "str" | "string" => "string",
        "int" | "integer" => "integer",
        "float" | "number" => "number",
        "bool" | "boolean" => "boolean",
        "dict" | "object" | "map" => "object",
        "list" | "array" | "tuple" => "array",
        "None" | "null" => "null",
        // Hints stepd does not know are the probe's business.
        _ => return Ok(()),
    };
    if is_type(v, wanted) {
        Ok(())
    } else {
        Err(format!("the value must be {hint}, not {}", type_name(v)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fields(result: Result<(), Vec<FieldViolation>>) -> Vec<String> {
        let violations = result.expect_err("the value should be refused");
        assert!(violations.iter().all(|v| v.reason == "INVALID_VALUE"));
        violations.into_iter().map(|v| v.field).collect()
    }

    #[test]
    fn schemas_and_hints_are_enforced() {
        let schema = json!({"type": "object", "required": ["model"],
            "properties": {"model": {"type": "string"}, "effort": {"enum": ["low", "high"]}},
            "additionalProperties": false});
        assert!(schema_check(&json!({"model": "m", "effort": "low"}), &schema).is_ok());
        assert!(schema_check(&json!({"effort": "low"}), &schema).is_err());
        assert_eq!(
            fields(schema_check(&json!({"model": 3}), &schema)),
            ["command.inject.value.model"]
        );
        assert!(schema_check(&json!({"model": "m", "x": 1}), &schema).is_err());
        assert!(schema_check(&json!({"model": "m", "effort": "max"}), &schema).is_err());
        assert!(hint_check(&json!("text"), "str").is_ok());
        assert!(hint_check(&json!(3), "float").is_ok());
        assert!(hint_check(&json!(3.5), "int").is_err());
        assert!(hint_check(&json!({"a": 1}), "list").is_err());
    }

    #[test]
    fn pattern_is_enforced() {
        let schema = json!({"type": "object",
            "properties": {"cmd": {"type": "string", "pattern": "^(ls|pwd)( .*)?$"}}});
        assert!(schema_check(&json!({"cmd": "ls -l"}), &schema).is_ok());
        assert_eq!(
            fields(schema_check(&json!({"cmd": "rm -rf /"}), &schema)),
            ["command.inject.value.cmd"]
        );
    }

    #[test]
    fn format_is_enforced() {
        let schema = json!({"type": "object", "properties": {
            "to": {"type": "string", "format": "email"},
            "when": {"type": "string", "format": "date-time"}}});
        assert!(
            schema_check(
                &json!({"to": "a@example.com", "when": "2026-12-01T15:00:00Z"}),
                &schema
            )
            .is_ok()
        );
        assert_eq!(
            fields(schema_check(
                &json!({"to": "nobody", "when": "yesterday"}),
                &schema
            )),
            ["command.inject.value.to", "command.inject.value.when"]
        );
    }

    #[test]
    fn one_of_is_enforced() {
        let schema = json!({"oneOf": [
            {"type": "string", "maxLength": 3},
            {"type": "string", "pattern": "^a"}]});
        assert!(schema_check(&json!("xyz"), &schema).is_ok());
        assert!(schema_check(&json!("abcdef"), &schema).is_ok());
        // Both branches: oneOf wants exactly one.
        assert_eq!(fields(schema_check(&json!("ab"), &schema)), [FIELD]);
        // Neither branch.
        assert_eq!(fields(schema_check(&json!("xyzxyz"), &schema)), [FIELD]);
    }

    #[test]
    fn every_violation_is_reported_with_its_path() {
        let schema = json!({"type": "object", "properties": {
            "args": {"type": "array", "items": {"type": "object",
                "properties": {"n": {"type": "integer", "minimum": 1}}}},
            "odd key": {"type": "boolean"}}});
        let got = fields(schema_check(
            &json!({"args": [{"n": 2}, {"n": 0}, {"n": 1.5}], "odd key": 1}),
            &schema,
        ));
        assert_eq!(
            got.len(),
            3,
            "one violation per bad field, not only the first: {got:?}"
        );
        assert!(got.contains(&"command.inject.value.args[1].n".to_owned()));
        assert!(got.contains(&"command.inject.value.args[2].n".to_owned()));
        assert!(got.contains(&r#"command.inject.value["odd key"]"#.to_owned()));
    }

    #[test]
    fn protobuf_doubles_read_as_written() {
        // Value and Struct carry only doubles: 2 arrives as 2.0 on both sides.
        let schema = json!({"type": "string", "minLength": 2.0});
        assert!(schema_check(&json!("ab"), &schema).is_ok());
        assert!(schema_check(&json!("a"), &schema).is_err());
        assert!(schema_check(&json!(2.0), &json!({"type": "integer"})).is_ok());
    }

    #[test]
    fn a_schema_that_does_not_compile_refuses() {
        assert_eq!(
            fields(schema_check(&json!("x"), &json!({"type": "strnig"}))),
            [FIELD]
        );
        // Nothing is fetched from the network or the disk to resolve a $ref.
        assert!(schema_check(&json!("x"), &json!({"$ref": "https://example.com/s.json"})).is_err());
    }

    #[test]
    fn check_returns_the_violations_in_the_error() {
        let point = PointInfo {
            editable: true,
            schema: Some(stepd_core::json::to_struct(
                json!({"properties": {"cmd": {"pattern": "^ls"}}})
                    .as_object()
                    .unwrap(),
            )),
            ..Default::default()
        };
        let bad = stepd_core::json::to_value(&json!({"cmd": "rm"}));
        let err = check(&bad, &point).unwrap_err();
        assert_eq!(err.reason(), ErrorReason::InvalidValue);
        assert_eq!(err.violations().len(), 1);
        assert_eq!(err.violations()[0].field, "command.inject.value.cmd");
        let good = stepd_core::json::to_value(&json!({"cmd": "ls"}));
        assert!(check(&good, &point).is_ok());
    }
}
