//! The `stepd.v1` API: prost messages, tonic clients and servers, and the
//! encoded file descriptor set (for gRPC reflection and JSON rendering).

#![allow(clippy::doc_lazy_continuation, clippy::large_enum_variant)]

pub mod codec;

/// Package `stepd.v1`.
pub mod v1 {
    tonic::include_proto!("stepd.v1");
}

/// Encoded `FileDescriptorSet` of every stepd proto and its imports, with source info.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/stepd_descriptor.bin"));

/// The wire protocol version this crate speaks.
pub const PROTOCOL_VERSION: &str = "stepd.v1";

/// The `ErrorInfo.domain` of every stepd error.
pub const ERROR_DOMAIN: &str = "stepd.dev";

/// A proto enum value's name without its type's prefix, as logs, spans and
/// metrics show it: `COMMAND_KIND_CONTINUE` → `CONTINUE`.
pub fn short_name(name: &'static str) -> &'static str {
    const PREFIXES: &[&str] = &[
        "COMMAND_KIND_",
        "PAUSE_REASON_",
        "END_REASON_",
        "SESSION_KIND_",
        "SESSION_STATE_",
    ];
    PREFIXES
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
        .unwrap_or(name)
}
