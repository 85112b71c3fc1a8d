//! gRPC plumbing the API and the cluster share: the core's errors as
//! statuses and back (`status`), the trace context a call carries on to
//! another replica, and the headers a replica forwards a call with.

pub mod status;

use opentelemetry::{propagation::TextMapPropagator as _, trace::TraceContextExt as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::codegen::http;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Headers a forwarding replica sets: the identity (and its role) the call
/// was authenticated as where it arrived.
pub const ON_BEHALF_OF: &str = "x-stepd-on-behalf-of";
/// See [`ON_BEHALF_OF`].
pub const ON_BEHALF_ROLE: &str = "x-stepd-on-behalf-role";

/// Names the RPC being served as the parent in `headers` (`traceparent`,
/// `tracestate`), replacing the caller's: a call this replica forwards to
/// the session's owner is a child of this replica's span there. With
/// export off, or outside an RPC, the headers stay as they are.
pub fn propagate_rpc(headers: &mut http::HeaderMap) {
    struct Into<'a>(&'a mut http::HeaderMap);
    impl opentelemetry::propagation::Injector for Into<'_> {
        fn set(&mut self, key: &str, value: String) {
            if let (Ok(name), Ok(value)) = (
                http::HeaderName::from_bytes(key.as_bytes()),
                http::HeaderValue::from_str(&value),
            ) {
                self.0.insert(name, value);
            }
        }
    }
    if !stepd_core::trace::enabled() {
        return;
    }
    let cx = tracing::Span::current().context();
    if cx.span().span_context().is_valid() {
        headers.remove("tracestate");
        TraceContextPropagator::new().inject_context(&cx, &mut Into(headers));
    }
}
