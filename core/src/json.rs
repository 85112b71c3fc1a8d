//! JSON (serde) and `google.protobuf.Value` / `Struct`, both ways: the API's
//! free-form values meet adapters' JSON and probes' schemas here, in one place.

use serde_json::{Map, Value, json};

/// A protobuf Struct as JSON.
pub fn from_struct(s: &prost_types::Struct) -> Value {
    Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), from_value(v)))
            .collect::<Map<_, _>>(),
    )
}

/// A protobuf Value as JSON.
pub fn from_value(v: &prost_types::Value) -> Value {
    use prost_types::value::Kind;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => json!(s),
        Some(Kind::BoolValue(b)) => json!(b),
        Some(Kind::StructValue(s)) => from_struct(s),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(from_value).collect()),
    }
}

/// JSON as a protobuf Value.
pub fn to_value(v: &Value) -> prost_types::Value {
    use prost_types::value::Kind;
    let kind = match v {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(a) => Kind::ListValue(prost_types::ListValue {
            values: a.iter().map(to_value).collect(),
        }),
        Value::Object(o) => Kind::StructValue(to_struct(o)),
    };
    prost_types::Value { kind: Some(kind) }
}

/// A JSON object as a protobuf Struct.
pub fn to_struct(o: &Map<String, Value>) -> prost_types::Struct {
    prost_types::Struct {
        fields: o.iter().map(|(k, v)| (k.clone(), to_value(v))).collect(),
    }
}
