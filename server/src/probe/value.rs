//! Probe values: printing `google.protobuf.Value` trees for display, and
//! checking an INJECT value against the schema or type hint the probe sent.

use prost_types::{Value, value::Kind};
use serde_json::Value as Json;
use stepd_proto::v1::{ErrorReason, PointInfo};

use crate::{
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
        return schema_check(&json, &struct_to_json(schema), "value").map_err(invalid);
    }
    if !point.type_hint.is_empty() {
        return hint_check(&json, &point.type_hint).map_err(invalid);
    }
    Ok(())
}

fn invalid(message: String) -> ApiError {
    ApiError::new(ErrorReason::InvalidValue, message).with("field", "command.inject.value")
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

/// A JSON Schema subset: type (one or a list), enum, const, required,
/// properties, additionalProperties: false, items, minimum, maximum,
/// minLength, maxLength.
fn schema_check(v: &Json, schema: &Json, at: &str) -> Result<(), String> {
    match &schema["type"] {
        Json::String(t) if !is_type(v, t) => {
            return Err(format!("{at} must be {t}, not {}", type_name(v)));
        }
        Json::Array(types) if !types.iter().filter_map(Json::as_str).any(|t| is_type(v, t)) => {
            return Err(format!("{at} has the wrong type ({})", type_name(v)));
        }
        _ => {}
    }
    if let Some(options) = schema["enum"].as_array()
        && !options.contains(v)
    {
        return Err(format!(
            "{at} must be one of {}",
            Json::Array(options.clone())
        ));
    }
    if !schema["const"].is_null() && schema["const"] != *v {
        return Err(format!("{at} must be {}", schema["const"]));
    }
    if let (Some(min), Some(n)) = (schema["minimum"].as_f64(), v.as_f64())
        && n < min
    {
        return Err(format!("{at} must be at least {min}"));
    }
    if let (Some(max), Some(n)) = (schema["maximum"].as_f64(), v.as_f64())
        && n > max
    {
        return Err(format!("{at} must be at most {max}"));
    }
    if let Some(s) = v.as_str() {
        let len = s.chars().count() as u64;
        if schema["minLength"].as_u64().is_some_and(|m| len < m) {
            return Err(format!("{at} is too short"));
        }
        if schema["maxLength"].as_u64().is_some_and(|m| len > m) {
            return Err(format!("{at} is too long"));
        }
    }
    if let Some(object) = v.as_object() {
        for required in schema["required"].as_array().into_iter().flatten() {
            if let Some(name) = required.as_str()
                && !object.contains_key(name)
            {
                return Err(format!("{at}.{name} is required"));
            }
        }
        let properties = schema["properties"].as_object();
        for (name, child) in object {
            match properties.and_then(|p| p.get(name)) {
                Some(sub) => schema_check(child, sub, &format!("{at}.{name}"))?,
                None if schema["additionalProperties"] == Json::Bool(false) => {
                    return Err(format!("{at}.{name} is not allowed"));
                }
                None => {}
            }
        }
    }
    if let (Some(items), Some(sub)) = (v.as_array(), schema.get("items"))
        && sub.is_object()
    {
        for (i, item) in items.iter().enumerate() {
            schema_check(item, sub, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
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

    #[test]
    fn schemas_and_hints_are_enforced() {
        let schema = json!({"type": "object", "required": ["model"],
            "properties": {"model": {"type": "string"}, "effort": {"enum": ["low", "high"]}},
            "additionalProperties": false});
        assert!(schema_check(&json!({"model": "m", "effort": "low"}), &schema, "value").is_ok());
        assert!(schema_check(&json!({"effort": "low"}), &schema, "value").is_err());
        assert!(schema_check(&json!({"model": 3}), &schema, "value").is_err());
        assert!(schema_check(&json!({"model": "m", "x": 1}), &schema, "value").is_err());
        assert!(schema_check(&json!({"model": "m", "effort": "max"}), &schema, "value").is_err());
        assert!(hint_check(&json!("text"), "str").is_ok());
        assert!(hint_check(&json!(3), "float").is_ok());
        assert!(hint_check(&json!(3.5), "int").is_err());
        assert!(hint_check(&json!({"a": 1}), "list").is_err());
    }
}
