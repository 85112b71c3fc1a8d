//! What server reflection describes: stepd's API, health, reflection itself,
//! and the `google.rpc` detail messages stepd's errors carry, so a generic
//! client (grpcurl) decodes an `ErrorInfo` instead of printing base64.

use prost_types::{
    DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet, MessageOptions,
    field_descriptor_proto::{Label, Type},
};
use stepd_proto::FILE_DESCRIPTOR_SET;
use tonic_reflection::server::Builder;

/// The reflection builder with every file registered (v1 and v1alpha are
/// built from it).
pub fn builder() -> Builder<'static> {
    Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET)
        .register_file_descriptor_set(FileDescriptorSet {
            file: vec![error_details()],
        })
}

/// `google/rpc/error_details.proto`, reduced to the two messages stepd sends
/// (`ErrorInfo`, `BadRequest`) with their published names and field numbers:
/// the wire schema is all a decoder needs.
fn error_details() -> FileDescriptorProto {
    let metadata_entry = DescriptorProto {
        name: Some("MetadataEntry".into()),
        field: vec![
            field("key", 1, Label::Optional, Type::String, None),
            field("value", 2, Label::Optional, Type::String, None),
        ],
        options: Some(MessageOptions {
            map_entry: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    };
    let error_info = DescriptorProto {
        name: Some("ErrorInfo".into()),
        field: vec![
            field("reason", 1, Label::Optional, Type::String, None),
            field("domain", 2, Label::Optional, Type::String, None),
            field(
                "metadata",
                3,
                Label::Repeated,
                Type::Message,
                Some(".google.rpc.ErrorInfo.MetadataEntry"),
            ),
        ],
        nested_type: vec![metadata_entry],
        ..Default::default()
    };
    let field_violation = DescriptorProto {
        name: Some("FieldViolation".into()),
        field: vec![
            field("field", 1, Label::Optional, Type::String, None),
            field("description", 2, Label::Optional, Type::String, None),
        ],
        ..Default::default()
    };
    let bad_request = DescriptorProto {
        name: Some("BadRequest".into()),
        field: vec![field(
            "field_violations",
            1,
            Label::Repeated,
            Type::Message,
            Some(".google.rpc.BadRequest.FieldViolation"),
        )],
        nested_type: vec![field_violation],
        ..Default::default()
    };
    FileDescriptorProto {
        name: Some("google/rpc/error_details.proto".into()),
        package: Some("google.rpc".into()),
        message_type: vec![error_info, bad_request],
        syntax: Some("proto3".into()),
        ..Default::default()
    }
}

fn field(
    name: &str,
    number: i32,
    label: Label,
    kind: Type,
    type_name: Option<&str>,
) -> FieldDescriptorProto {
    FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(label.into()),
        r#type: Some(kind.into()),
        type_name: type_name.map(Into::into),
        json_name: Some(json_name(name)),
        ..Default::default()
    }
}

/// protoc's JSON name: lowerCamelCase of the field name.
fn json_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;
    use prost_reflect::{DescriptorPool, DynamicMessage};

    /// The descriptor decodes what tonic-types encodes, field for field.
    #[test]
    fn the_descriptor_decodes_the_details_stepd_sends() {
        let pool = DescriptorPool::from_file_descriptor_set(FileDescriptorSet {
            file: vec![error_details()],
        })
        .expect("a valid file");
        let info = tonic_types::pb::ErrorInfo {
            reason: "PAUSE_NOT_FOUND".into(),
            domain: "stepd.dev".into(),
            metadata: [("key".to_owned(), "p-1".to_owned())].into(),
        };
        let desc = pool.get_message_by_name("google.rpc.ErrorInfo").unwrap();
        let decoded = DynamicMessage::decode(desc, info.encode_to_vec().as_slice()).unwrap();
        let json = serde_json::to_value(&decoded).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"reason": "PAUSE_NOT_FOUND", "domain": "stepd.dev", "metadata": {"key": "p-1"}})
        );
        let bad = tonic_types::pb::BadRequest {
            field_violations: vec![tonic_types::pb::bad_request::FieldViolation {
                field: "spec.source.line".into(),
                description: "must be at least 1".into(),
                ..Default::default()
            }],
        };
        let desc = pool.get_message_by_name("google.rpc.BadRequest").unwrap();
        let decoded = DynamicMessage::decode(desc, bad.encode_to_vec().as_slice()).unwrap();
        assert_eq!(
            serde_json::to_value(&decoded).unwrap(),
            serde_json::json!({"fieldViolations": [{"field": "spec.source.line", "description": "must be at least 1"}]})
        );
    }
}
