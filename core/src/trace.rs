//! The daemon's own spans: a session or a pause exported as an OpenTelemetry
//! span from start to end, and a probe's W3C trace context read into one.
//! The tracer is installed once by the binary's telemetry set-up; until it
//! is, every span here is empty and costs one check of a `OnceLock`.

use std::{borrow::Cow, sync::OnceLock, time::SystemTime};

use opentelemetry::{
    Context, KeyValue,
    propagation::{Extractor, TextMapPropagator},
    trace::{SpanKind, Status, TraceContextExt as _, Tracer as _},
};
use opentelemetry_sdk::{propagation::TraceContextPropagator, trace::SdkTracer};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The tracer spans are exported through; set once, when export is on.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// Turns export on: spans started from now on go through `tracer`. Only
/// the first call counts.
pub fn install(tracer: SdkTracer) {
    let _ = TRACER.set(tracer);
}

/// Whether spans are exported. One atomic load.
#[inline]
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// A program's span as W3C Trace Context (a probe's `traceparent` and
/// `tracestate`); names none when `traceparent` is empty or malformed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Remote<'a> {
    /// `00-TRACE-SPAN-FLAGS`.
    pub traceparent: &'a str,
    /// Vendor entries, kept only beside a valid `traceparent`.
    pub tracestate: &'a str,
}

impl Remote<'_> {
    /// The context it names (invalid if it names none: the propagator
    /// refuses malformed input rather than failing).
    fn context(self) -> Context {
        struct Headers<'a>(Remote<'a>);
        impl Extractor for Headers<'_> {
            fn get(&self, key: &str) -> Option<&str> {
                match key {
                    "traceparent" => Some(self.0.traceparent),
                    "tracestate" => Some(self.0.tracestate),
                    _ => None,
                }
            }
            fn keys(&self) -> Vec<&str> {
                vec!["traceparent", "tracestate"]
            }
        }
        if self.traceparent.is_empty() {
            return Context::new();
        }
        TraceContextPropagator::new().extract_with_context(&Context::new(), &Headers(self))
    }
}

// ----- spans of the daemon's own --------------------------------------------

/// A span started and ended by hand: a session from start to end, a pause
/// for exactly the time it is held. Holds nothing when export is off, and
/// then every method returns at once (attribute lists are built by closures
/// that are not called).
#[derive(Clone, Default)]
pub struct Span(Option<Context>);

impl std::fmt::Debug for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (trace, span) = self.ids();
        write!(f, "Span({trace}/{span})")
    }
}

impl Span {
    /// No span.
    pub const fn none() -> Self {
        Self(None)
    }

    /// The span of the RPC being served, as the parent of what it starts
    /// (no span outside an RPC or with export off).
    pub fn current_rpc() -> Self {
        if !enabled() {
            return Self::none();
        }
        let cx = tracing::Span::current().context();
        Self(cx.span().span_context().is_valid().then_some(cx))
    }

    /// Starts an internal span named `name`, a child of `parent` (a root
    /// span if `parent` holds none).
    pub fn start(
        name: impl Into<Cow<'static, str>>,
        parent: &Span,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Self {
        let Some(tracer) = TRACER.get() else {
            return Self::none();
        };
        let parent = parent.0.clone().unwrap_or_default();
        let span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_attributes(attributes())
            .start_with_context(tracer, &parent);
        Self(Some(parent.with_span(span)))
    }

    /// Starts an internal span named `name` under the span `remote` names
    /// (a program's own, reported by a probe), linked to `local`; under
    /// `local` when `remote` names none.
    pub fn start_under(
        name: impl Into<Cow<'static, str>>,
        remote: Remote<'_>,
        local: &Span,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Self {
        let Some(tracer) = TRACER.get() else {
            return Self::none();
        };
        let remote = remote.context();
        if !remote.span().span_context().is_valid() {
            return Self::start(name, local, attributes);
        }
        let mut builder = tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_attributes(attributes());
        if let Some(cx) = &local.0 {
            builder = builder.with_links(vec![opentelemetry::trace::Link::with_context(
                cx.span().span_context().clone(),
            )]);
        }
        let span = builder.start_with_context(tracer, &remote);
        Self(Some(remote.with_span(span)))
    }

    /// Hex trace and span ids, empty without a span.
    pub fn ids(&self) -> (String, String) {
        match &self.0 {
            Some(cx) => {
                let span = cx.span();
                let sc = span.span_context();
                (sc.trace_id().to_string(), sc.span_id().to_string())
            }
            None => (String::new(), String::new()),
        }
    }

    /// The W3C `traceparent` naming this span as the parent, for a program
    /// stepd starts; none without a span.
    pub fn traceparent(&self) -> Option<String> {
        let cx = self.0.as_ref()?;
        let span = cx.span();
        let sc = span.span_context();
        Some(format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        ))
    }

    /// Adds attributes.
    pub fn set(&self, attributes: impl FnOnce() -> Vec<KeyValue>) {
        if let Some(cx) = &self.0 {
            cx.span().set_attributes(attributes());
        }
    }

    /// Adds an event.
    pub fn event(&self, name: &'static str, attributes: impl FnOnce() -> Vec<KeyValue>) {
        if let Some(cx) = &self.0 {
            cx.span().add_event(Cow::Borrowed(name), attributes());
        }
    }

    /// Marks the span failed.
    pub fn fail(&self, description: impl Into<Cow<'static, str>>) {
        if let Some(cx) = &self.0 {
            cx.span().set_status(Status::error(description));
        }
    }

    /// Ends the span now, with last attributes. Later calls do nothing.
    pub fn end(&mut self, attributes: impl FnOnce() -> Vec<KeyValue>) {
        self.end_at(SystemTime::now(), attributes);
    }

    /// Ends the span as of `at`, with last attributes. Later calls do
    /// nothing.
    pub fn end_at(&mut self, at: SystemTime, attributes: impl FnOnce() -> Vec<KeyValue>) {
        if let Some(cx) = self.0.take() {
            let span = cx.span();
            span.set_attributes(attributes());
            span.end_with_timestamp(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::TraceContextExt as _;

    use super::Remote;

    #[test]
    fn a_probes_trace_context_is_read_or_ignored() {
        let good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let cx = Remote {
            traceparent: good,
            tracestate: "vendor=x,other=y",
        }
        .context();
        let span = cx.span();
        let sc = span.span_context();
        assert!(sc.is_valid() && sc.is_remote());
        assert_eq!(sc.trace_state().get("vendor"), Some("x"));
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "zz-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-é-extra",
            "\u{0}",
        ] {
            let cx = Remote {
                traceparent: bad,
                tracestate: "=,=,\u{7f}",
            }
            .context();
            assert!(!cx.span().span_context().is_valid(), "{bad:?}");
        }
    }
}
