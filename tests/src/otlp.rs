//! A real OTLP gRPC metrics receiver for the metrics tests (Jaeger stores
//! no metrics): the collector's own `MetricsService`, served on a free
//! loopback port, keeping the latest value of every series the daemon
//! exports, and waits with a deadline until they say what a test expects.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use opentelemetry_proto::tonic::{
    collector::metrics::v1::{
        ExportMetricsServiceRequest, ExportMetricsServiceResponse,
        metrics_service_server::{MetricsService, MetricsServiceServer},
    },
    common::v1::{AnyValue, KeyValue, any_value},
    metrics::v1::{metric::Data, number_data_point},
};
use tokio::sync::Notify;
use tokio_stream::wrappers::TcpListenerStream;

use crate::DEADLINE;

/// One series' latest value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// A gauge or a sum.
    Number(f64),
    /// A histogram: how many were recorded and their sum.
    Histogram {
        /// Recordings.
        count: u64,
        /// Their sum.
        sum: f64,
    },
}

impl Value {
    /// A number's value, a histogram's count.
    pub fn number(self) -> f64 {
        match self {
            Self::Number(n) => n,
            Self::Histogram { count, .. } => count as f64,
        }
    }
}

/// A series: the metric's name and its attributes (`key=value`, sorted).
pub type Series = (String, BTreeMap<String, String>);

/// What has been received: the latest value of each series, and the
/// resource's `service.name`.
#[derive(Debug, Default, Clone)]
pub struct Received {
    /// Every series seen, at its latest value.
    pub series: BTreeMap<Series, Value>,
    /// `service.name` of the last export.
    pub service: String,
    /// Export requests received.
    pub exports: usize,
}

impl Received {
    /// The latest value of `metric` whose attributes include `attributes`
    /// (the sum over every such series).
    pub fn value(&self, metric: &str, attributes: &[(&str, &str)]) -> Option<Value> {
        let mut found: Option<Value> = None;
        for ((name, attrs), value) in &self.series {
            let matches = name == metric
                && attributes
                    .iter()
                    .all(|(k, v)| attrs.get(*k).is_some_and(|a| a == v));
            if !matches {
                continue;
            }
            found = Some(match (found, *value) {
                (None, v) => v,
                (Some(Value::Number(a)), Value::Number(b)) => Value::Number(a + b),
                (
                    Some(Value::Histogram { count, sum }),
                    Value::Histogram { count: c2, sum: s2 },
                ) => Value::Histogram {
                    count: count + c2,
                    sum: sum + s2,
                },
                (Some(v), _) => v,
            });
        }
        found
    }

    /// Every metric name received.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.series.keys().map(|(n, _)| n.as_str()).collect();
        names.dedup();
        names
    }
}

#[derive(Default)]
struct Shared {
    received: Mutex<Received>,
    changed: Notify,
}

struct Service(Arc<Shared>);

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

fn attributes(list: &[KeyValue]) -> BTreeMap<String, String> {
    list.iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

#[tonic::async_trait]
impl MetricsService for Service {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let request = request.into_inner();
        {
            let mut received = self.0.received.lock().unwrap();
            received.exports += 1;
            for resource in &request.resource_metrics {
                if let Some(r) = &resource.resource
                    && let Some(name) = r.attributes.iter().find(|kv| kv.key == "service.name")
                {
                    received.service = text(name.value.as_ref());
                }
                for scope in &resource.scope_metrics {
                    for metric in &scope.metrics {
                        let mut put = |attrs: &[KeyValue], value: Value| {
                            received
                                .series
                                .insert((metric.name.clone(), attributes(attrs)), value);
                        };
                        let number = |v: &Option<number_data_point::Value>| match v {
                            Some(number_data_point::Value::AsDouble(d)) => *d,
                            Some(number_data_point::Value::AsInt(i)) => *i as f64,
                            None => f64::NAN,
                        };
                        match &metric.data {
                            Some(Data::Gauge(g)) => {
                                for p in &g.data_points {
                                    put(&p.attributes, Value::Number(number(&p.value)));
                                }
                            }
                            Some(Data::Sum(s)) => {
                                for p in &s.data_points {
                                    put(&p.attributes, Value::Number(number(&p.value)));
                                }
                            }
                            Some(Data::Histogram(h)) => {
                                for p in &h.data_points {
                                    put(
                                        &p.attributes,
                                        Value::Histogram {
                                            count: p.count,
                                            sum: p.sum.unwrap_or(f64::NAN),
                                        },
                                    );
                                }
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        self.0.changed.notify_waiters();
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// The receiver, stopped when dropped.
pub struct MetricsReceiver {
    /// Its loopback port.
    pub port: u16,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for MetricsReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl MetricsReceiver {
    /// Serves on a free loopback port.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared::default());
        let service = MetricsServiceServer::new(Service(shared.clone()));
        let server = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await;
        });
        Self {
            port,
            shared,
            server,
        }
    }

    /// `http://127.0.0.1:PORT`, for `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What has been received so far.
    pub fn received(&self) -> Received {
        self.shared.received.lock().unwrap().clone()
    }

    /// Waits until what was received satisfies `ready` (checked at each
    /// export), at most [`DEADLINE`]; panics saying `what` and what came.
    pub async fn wait_for(&self, what: &str, ready: impl Fn(&Received) -> bool) -> Received {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let changed = self.shared.changed.notified();
            let received = self.received();
            if ready(&received) {
                return received;
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                panic!("no export showed {what} in time; last received: {received:#?}");
            }
            let _ = tokio::time::timeout(left.min(Duration::from_secs(5)), changed).await;
        }
    }
}
