//! Logging and tracing: `tracing` to stderr, filtered by `RUST_LOG`, as text
//! or JSON lines; and, when the standard `OTEL_*` variables ask for it,
//! OpenTelemetry traces exported over OTLP gRPC in batches, and metrics
//! (`stepd_core::metrics`) exported periodically.
//!
//! Three kinds of span are exported (docs/observability.md): one per RPC
//! (the `rpc` tracing span, bridged, continuing the caller's `traceparent`),
//! one per session and one per pause. The last two are started and ended by
//! hand ([`Span`]) because they outlive any task's scope. When nothing is
//! exported the subscriber is the plain one, [`Span`] holds nothing, and
//! every entry point here returns after one check of [`enabled`].

use std::sync::OnceLock;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::{
    propagation::{Extractor, TextMapPropagator},
    trace::{Status, TraceContextExt as _, TracerProvider as _},
};
use opentelemetry_sdk::{
    Resource, metrics::SdkMeterProvider, propagation::TraceContextPropagator,
    trace::SdkTracerProvider,
};
use tonic::codegen::http;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::{EnvFilter, Layer as _, filter::Targets, fmt, prelude::*};

use crate::log_writer::{LogFlush, LogWriter};

/// The service name when neither `OTEL_SERVICE_NAME` nor
/// `OTEL_RESOURCE_ATTRIBUTES` gives one.
const SERVICE_NAME: &str = "stepd";

/// The target of the RPC span (`trace_fn` in server.rs): the only tracing
/// spans exported.
const RPC_TARGET: &str = "stepd::server";

/// The target of the RPC span of health checks and reflection, which are
/// not exported.
const UNTRACED_TARGET: &str = "stepd::untraced";

pub use stepd_core::trace::enabled;

/// Flushes what is left to export when the daemon stops.
#[must_use = "call shutdown when the daemon stops, or the last spans are lost"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
    logs: LogFlush,
    meters: Option<SdkMeterProvider>,
}

impl Telemetry {
    /// Exports the spans still batched and the metrics' last values, and
    /// stops the exporters, waiting at most [`EXPORT_SHUTDOWN`] in all: a
    /// collector that does not answer costs the exit no more than that.
    pub async fn shutdown(self) {
        let Self {
            provider,
            meters,
            logs,
        } = self;
        if provider.is_some() || meters.is_some() {
            let (done, finished) = tokio::sync::oneshot::channel();
            // A thread of its own rather than the blocking pool, which the
            // runtime would wait for on the way out, however long it takes.
            let spawned = std::thread::Builder::new()
                .name("stepd-otlp-flush".into())
                .spawn(move || {
                    let _ = done.send(flush_exporters(provider, meters));
                });
            match spawned {
                Ok(_) => match tokio::time::timeout(EXPORT_SHUTDOWN, finished).await {
                    Ok(Ok(problems)) => {
                        for problem in problems {
                            tracing::warn!("OpenTelemetry: {problem}");
                        }
                    }
                    Ok(Err(_)) => {}
                    Err(_) => tracing::warn!(
                        waited = ?EXPORT_SHUTDOWN,
                        "OpenTelemetry: the collector did not take the last spans and metrics in time; they are dropped"
                    ),
                },
                Err(err) => {
                    tracing::warn!("OpenTelemetry: could not flush the last spans: {err}");
                }
            }
        }
        logs.flush();
    }
}

/// How long the exit waits for the collector to take the last spans and
/// metrics (docs/observability.md).
pub const EXPORT_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(1);

/// Shuts both exporters down, the spans' first; says what failed.
fn flush_exporters(
    provider: Option<SdkTracerProvider>,
    meters: Option<SdkMeterProvider>,
) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(Err(err)) = provider.map(|p| p.shutdown()) {
        problems.push(format!("flushing the last spans failed: {err}"));
    }
    if let Some(Err(err)) = meters.map(|m| m.shutdown()) {
        problems.push(format!("exporting the last metrics failed: {err}"));
    }
    problems
}

/// What is exported: each signal is turned on by its own variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    Traces,
    Metrics,
}

impl Signal {
    /// As the variables spell it: `OTEL_EXPORTER_OTLP_{TRACES}_ENDPOINT`.
    fn upper(self) -> &'static str {
        match self {
            Self::Traces => "TRACES",
            Self::Metrics => "METRICS",
        }
    }

    fn lower(self) -> &'static str {
        match self {
            Self::Traces => "traces",
            Self::Metrics => "metrics",
        }
    }
}

/// Whether the environment asks for export of `signal`: an OTLP endpoint
/// is named (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` /
/// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, or `OTEL_EXPORTER_OTLP_ENDPOINT`),
/// the SDK is not disabled (`OTEL_SDK_DISABLED`), and
/// `OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER` is unset or `otlp`.
/// `Err` says why a request for export cannot be honoured (only gRPC is
/// built in).
fn export_wanted(signal: Signal, var: impl Fn(&str) -> Option<String>) -> Result<bool, String> {
    let set = |name: &str| {
        var(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let (upper, lower) = (signal.upper(), signal.lower());
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(false);
    }
    match set(&format!("OTEL_{upper}_EXPORTER")).as_deref() {
        None | Some("otlp") => {}
        Some("none") => return Ok(false),
        Some(other) => {
            return Err(format!(
                "OTEL_{upper}_EXPORTER={other}: only otlp (or none) is supported; no {lower} are exported"
            ));
        }
    }
    if set(&format!("OTEL_EXPORTER_OTLP_{upper}_ENDPOINT"))
        .or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT"))
        .is_none()
    {
        return Ok(false);
    }
    match set(&format!("OTEL_EXPORTER_OTLP_{upper}_PROTOCOL"))
        .or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .as_deref()
    {
        None | Some("grpc") => Ok(true),
        Some(other) => Err(format!(
            "OTEL_EXPORTER_OTLP_PROTOCOL={other}: stepd exports over grpc only; no {lower} are exported"
        )),
    }
}

/// The resource: what `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`
/// say, with the service named `stepd` unless they name it.
fn resource() -> Resource {
    let from_env = Resource::builder().build();
    let named = from_env
        .get(&opentelemetry::Key::from_static_str("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    if named {
        from_env
    } else {
        Resource::builder().with_service_name(SERVICE_NAME).build()
    }
}

/// The batching exporter (endpoint, headers, timeout from the environment;
/// the connection is made lazily, by the first export).
fn provider() -> Result<SdkTracerProvider, String> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()
        .map_err(|err| format!("building the OTLP exporter: {err}"))?;
    // The sampler comes from OTEL_TRACES_SAMPLER / _ARG, the batch from
    // OTEL_BSP_*: spans are queued and exported by the processor's own
    // thread, never on the caller's.
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource())
        .build())
}

/// The periodic metrics exporter (endpoint, headers, timeout from the
/// environment, the interval from `OTEL_METRIC_EXPORT_INTERVAL`, 60 s by
/// default): the SDK's own thread collects and exports, and the first
/// connection is made by the first export.
fn meter_provider() -> Result<SdkMeterProvider, String> {
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_tonic()
        .build()
        .map_err(|err| format!("building the OTLP metrics exporter: {err}"))?;
    Ok(SdkMeterProvider::builder()
        .with_periodic_exporter(exporter)
        .with_resource(resource())
        .build())
}

/// The runtime the exporters' gRPC connections live on: one thread of its
/// own, so encoding and sending a batch never takes a worker of the
/// daemon's runtime from a hold or a step. It lives as long as the process
/// (the last flush at shutdown runs on it).
fn export_runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    // Made once, whether it worked or not: a second runtime would be
    // dropped inside the daemon's, which tokio refuses.
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("stepd-otlp")
                .enable_all()
                .build()
                .map_err(|err| format!("starting the exporters' thread: {err}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// A signal's exporter when the environment asks for one, or why not.
fn wanted<P>(signal: Signal, build: fn() -> Result<P, String>) -> (Option<P>, Option<String>) {
    match export_wanted(signal, |name| std::env::var(name).ok()) {
        // Built inside the export runtime, so the channel's tasks are
        // spawned there.
        Ok(true) => match export_runtime().and_then(|runtime| {
            let _inside = runtime.enter();
            build()
        }) {
            Ok(provider) => (Some(provider), None),
            Err(problem) => (None, Some(problem)),
        },
        Ok(false) => (None, None),
        Err(problem) => (None, Some(problem)),
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber, and the exporter when the environment
/// asks for one. Call once, inside the runtime, before anything logs.
pub fn init(format: LogFormat) -> Telemetry {
    let filter = |default: &str| {
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default))
    };
    let (provider, problem) = wanted(Signal::Traces, provider);
    let (meters, meters_problem) = wanted(Signal::Metrics, meter_provider);
    // The SDK's own news (a failed export) at warn and above.
    let default_filter = if provider.is_some() || meters.is_some() {
        "info,opentelemetry=warn,opentelemetry_sdk=warn,opentelemetry-otlp=warn"
    } else {
        "info"
    };
    let (writer, logs) = LogWriter::stderr();
    let result = match &provider {
        // Export off: exactly the subscriber stepd always had.
        None => {
            let builder = fmt()
                .with_env_filter(filter(default_filter))
                .with_writer(writer);
            match format {
                LogFormat::Text => builder.try_init(),
                LogFormat::Json => builder.json().flatten_event(true).try_init(),
            }
            .map_err(|err| err.to_string())
        }
        Some(provider) => {
            let tracer = provider.tracer("stepd");
            stepd_core::trace::install(tracer.clone());
            let logs = match format {
                LogFormat::Text => fmt::layer().with_writer(writer).boxed(),
                LogFormat::Json => fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_writer(writer)
                    .boxed(),
            };
            // The RPC span alone is bridged, whatever RUST_LOG says.
            let spans = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_threads(false)
                .with_location(false)
                .with_target(false)
                // No busy/idle timing on every enter and exit of a
                // long-lived stream's span.
                .with_tracked_inactivity(false)
                .with_filter(Targets::new().with_target(RPC_TARGET, tracing::Level::INFO));
            tracing_subscriber::registry()
                .with(logs.with_filter(filter(default_filter)))
                .with(spans)
                .try_init()
                .map_err(|err| err.to_string())
        }
    };
    if let Err(err) = result {
        eprintln!("stepd: logging was already initialised: {err}");
    }
    for problem in [problem, meters_problem].into_iter().flatten() {
        tracing::warn!("OpenTelemetry: {problem}");
    }
    if provider.is_some() {
        tracing::info!("OpenTelemetry: exporting traces over OTLP gRPC");
    }
    if let Some(meters) = &meters {
        stepd_core::metrics::install(meters.meter("stepd"));
        tracing::info!("OpenTelemetry: exporting metrics over OTLP gRPC");
    }
    Telemetry {
        provider,
        meters,
        logs,
    }
}

// ----- the RPC span -----------------------------------------------------------

struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// The span of one RPC (the server's `trace_fn`). With export on it is
/// named after the method, carries the RPC attributes and continues the
/// trace the caller's `traceparent` / `tracestate` name.
pub fn rpc_span(request: &http::Request<()>) -> tracing::Span {
    let path = request.uri().path();
    if !enabled() {
        return tracing::info_span!(target: RPC_TARGET, "rpc", path = %path);
    }
    if path.starts_with("/grpc.") {
        // Health checks and reflection: logged as ever, not exported (a
        // kubelet's probe every few seconds would fill the traces).
        return tracing::info_span!(target: UNTRACED_TARGET, "rpc", path = %path);
    }
    let method = path.strip_prefix('/').unwrap_or(path);
    let span = tracing::info_span!(
        target: RPC_TARGET,
        "rpc",
        path = %path,
        otel.name = %method,
        otel.kind = "server",
        rpc.system.name = "grpc",
        rpc.method = %method,
    );
    let caller = TraceContextPropagator::new().extract(&Headers(request.headers()));
    if caller.span().span_context().is_valid() {
        let _ = span.set_parent(caller);
    }
    span
}

pub use stepd_rpc::propagate_rpc;

/// Ends the RPC span with the call's status: at once for a trailers-only
/// answer, else when the body's trailers pass (or the body is dropped,
/// CANCELLED). Runs inside the RPC span; with export off it returns the
/// response untouched.
pub fn rpc_response(
    response: http::Response<tonic::body::Body>,
) -> http::Response<tonic::body::Body> {
    if !enabled() {
        return response;
    }
    let span = tracing::Span::current();
    if let Some(code) = grpc_code(response.headers()) {
        record_status(&span, code);
        return response;
    }
    response.map(|body| {
        tonic::body::Body::new(StatusBody {
            inner: body,
            span: Some(span),
        })
    })
}

fn grpc_code(headers: &http::HeaderMap) -> Option<tonic::Code> {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map(tonic::Code::from_i32)
}

/// `rpc.response.status_code`, and an error status for the codes the gRPC
/// conventions count as server errors.
fn record_status(span: &tracing::Span, code: tonic::Code) {
    use tonic::Code as C;
    span.set_attribute(
        "rpc.response.status_code",
        stepd_core::error::code_name(stepd_rpc::status::core_code(code)),
    );
    span.set_attribute("rpc.grpc.status_code", code as i64);
    if matches!(
        code,
        C::Unknown
            | C::DeadlineExceeded
            | C::Unimplemented
            | C::Internal
            | C::Unavailable
            | C::DataLoss
    ) {
        span.set_status(Status::error(stepd_core::error::code_name(
            stepd_rpc::status::core_code(code),
        )));
    }
}

/// A response body that records the status its trailers carry on the RPC
/// span, and holds the span open until then.
struct StatusBody {
    inner: tonic::body::Body,
    span: Option<tracing::Span>,
}

impl http_body::Body for StatusBody {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        let code = match &polled {
            std::task::Poll::Ready(Some(Ok(frame))) => frame.trailers_ref().and_then(grpc_code),
            std::task::Poll::Ready(Some(Err(status))) => Some(status.code()),
            std::task::Poll::Ready(None) => Some(tonic::Code::Ok),
            std::task::Poll::Pending => None,
        };
        if let Some(code) = code
            && let Some(span) = self.span.take()
        {
            end_stream_span(&span, code);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for StatusBody {
    fn drop(&mut self) {
        if let Some(span) = self.span.take() {
            end_stream_span(&span, tonic::Code::Cancelled);
        }
    }
}

/// Records a streamed response's status from inside its span: the exporter
/// ends a span at its last exit, not when its last handle goes, so a
/// stream's span not entered now would end where its first answer did.
fn end_stream_span(span: &tracing::Span, code: tonic::Code) {
    span.in_scope(|| record_status(span, code));
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::{Signal, export_wanted};

    fn wanted(vars: &[(&str, &str)]) -> Result<bool, String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        export_wanted(Signal::Traces, |name| vars.get(name).cloned())
    }

    #[test]
    fn metrics_follow_their_own_variables() {
        let of = |vars: &[(&str, &str)]| {
            let vars: HashMap<String, String> = vars
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            export_wanted(Signal::Metrics, |name| vars.get(name).cloned())
        };
        assert_eq!(of(&[]), Ok(false));
        assert_eq!(
            of(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4317")]),
            Ok(false)
        );
        assert_eq!(
            of(&[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://c:4317")]),
            Ok(true)
        );
        assert_eq!(
            of(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
                ("OTEL_METRICS_EXPORTER", "none")
            ]),
            Ok(false)
        );
        assert!(
            of(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
                ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/json")
            ])
            .is_err()
        );
    }

    #[test]
    fn nothing_set_exports_nothing() {
        assert_eq!(wanted(&[]), Ok(false));
        assert_eq!(wanted(&[("OTEL_SERVICE_NAME", "x")]), Ok(false));
        assert_eq!(wanted(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]), Ok(false));
    }

    #[test]
    fn an_endpoint_turns_export_on() {
        assert_eq!(
            wanted(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")]),
            Ok(true)
        );
        assert_eq!(
            wanted(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4317")]),
            Ok(true)
        );
        assert_eq!(
            wanted(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_TRACES_EXPORTER", "otlp"),
            ]),
            Ok(true)
        );
    }

    #[test]
    fn disabled_or_none_wins() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317");
        assert_eq!(
            wanted(&[endpoint, ("OTEL_SDK_DISABLED", "TRUE")]),
            Ok(false)
        );
        assert_eq!(
            wanted(&[endpoint, ("OTEL_SDK_DISABLED", "false")]),
            Ok(true)
        );
        assert_eq!(
            wanted(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]),
            Ok(false)
        );
    }

    #[test]
    fn what_is_not_built_in_is_refused() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        assert!(wanted(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]).is_err());
        assert!(
            wanted(&[
                endpoint,
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
            ])
            .is_ok()
        );
        assert!(wanted(&[endpoint, ("OTEL_TRACES_EXPORTER", "zipkin")]).is_err());
    }
}
