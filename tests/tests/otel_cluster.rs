//! OpenTelemetry from replicas on one PostgreSQL database: a call one
//! replica forwards to the session's owner is a child of the forwarding
//! replica's span in one trace (real Jaeger); each replica's metrics
//! (real OTLP receiver) name it and count only what it runs, so their sum
//! is the cluster's, peers' relay streams not counted as subscribers.

use serde_json::Value as Json;
use stepd_e2e::{
    Daemon, Subscription, TempDir, dap,
    jaeger::{
        Jaeger, caller_context, command_without_otel, find, operation, parent_of, service_of,
        span_id, traced_command,
    },
    otlp::{MetricsReceiver, Received},
    postgres,
    probe::Probe,
};
use stepd_proto::v1::{
    ContinueCommand, DebugCommand, DebugInput, Pause, PingRequest, SendDebugInputRequest, Watch,
    daemon_service_client::DaemonServiceClient, debug_command::Command,
    session_service_client::SessionServiceClient,
};

/// A replica on `url` started from `command`, its instance id, and a
/// stream on it past its snapshot.
async fn replica(
    mut command: tokio::process::Command,
    dir: &TempDir,
    url: &str,
) -> (Daemon, String, Subscription) {
    command.args(["--database-url", url]);
    let daemon = Daemon::spawn(command, dir.path()).await;
    let id = DaemonServiceClient::new(daemon.channel().await)
        .ping(PingRequest::default())
        .await
        .unwrap()
        .into_inner()
        .instance_id;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    (daemon, id, sub)
}

/// A probe on `daemon` holding once; its pause as `sub` shows it.
async fn holding(daemon: &Daemon, sub: &mut Subscription, hit: &str) -> (Probe, Pause) {
    let (probe, _) = Probe::connect(daemon, &[]).await;
    probe
        .hit(hit, "tool_call", "Bash", Default::default(), &["turn"])
        .await;
    let pause = dap::next_pause(sub, &probe.session_id).await;
    (probe, pause)
}

fn send_debug_input(key: &str) -> SendDebugInputRequest {
    SendDebugInputRequest {
        input: Some(DebugInput {
            key: key.into(),
            command: Some(DebugCommand {
                command: Some(Command::Resume(ContinueCommand {})),
            }),
            client_name: "test".into(),
        }),
    }
}

#[tokio::test]
async fn a_forwarded_call_is_a_child_of_the_forwarding_replicas_span() {
    let url = postgres::database("otel_forwarded");
    let jaeger = Jaeger::start().await;
    let (dir_a, dir_b) = (TempDir::new("otel-a"), TempDir::new("otel-b"));
    let (a, id_a, mut on_a) =
        replica(traced_command(&dir_a, &jaeger, "stepd-a"), &dir_a, &url).await;
    let (b, _, mut on_b) = replica(traced_command(&dir_b, &jaeger, "stepd-b"), &dir_b, &url).await;
    let (_probe, pause) = holding(&a, &mut on_a, "h1").await;
    assert_eq!(pause.replica_id, id_a);
    // B shows A's pause; the answer given on B is carried out on A.
    dap::next_pause(&mut on_b, &pause.session_id).await;
    let (traceparent, trace, caller) = caller_context(0x71);
    let mut request = tonic::Request::new(send_debug_input(&pause.key));
    request
        .metadata_mut()
        .insert("traceparent", traceparent.parse().unwrap());
    SessionServiceClient::new(b.channel().await)
        .send_debug_input(request)
        .await
        .unwrap();

    const METHOD: &str = "stepd.v1.SessionService/SendDebugInput";
    let answered = jaeger
        .trace(&trace, |spans| {
            spans.iter().filter(|s| operation(s) == METHOD).count() == 2
        })
        .await;
    let spans = answered["spans"].as_array().unwrap();
    let on = |service: &str| -> &Json {
        find(spans, |s| {
            operation(s) == METHOD && service_of(&answered, s) == service
        })
        .unwrap_or_else(|| panic!("no {METHOD} span of {service}: {answered:#}"))
    };
    let (forwarding, owner) = (on("stepd-b"), on("stepd-a"));
    assert_eq!(
        parent_of(forwarding),
        Some(caller.as_str()),
        "{forwarding:#}"
    );
    assert_eq!(
        parent_of(owner),
        Some(span_id(forwarding)),
        "A's span is B's child: {answered:#}"
    );
    a.stop().await;
    b.stop().await;
}

/// The latest value of `metric` on `replica`'s points with `attributes`.
fn on(got: &Received, metric: &str, replica: &str, attributes: &[(&str, &str)]) -> f64 {
    let mut all = vec![("stepd.replica", replica)];
    all.extend_from_slice(attributes);
    got.value(metric, &all).map_or(f64::NAN, |v| v.number())
}

#[tokio::test]
async fn each_replica_reports_what_it_runs_and_the_sum_is_the_clusters() {
    let url = postgres::database("otel_replica_metrics");
    let receiver = MetricsReceiver::start().await;
    let metered = |dir: &TempDir| {
        let mut command = command_without_otel(dir.path());
        command
            .env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", receiver.endpoint())
            .env("OTEL_METRIC_EXPORT_INTERVAL", "200");
        command
    };
    let (dir_a, dir_b) = (TempDir::new("metrics-a"), TempDir::new("metrics-b"));
    let (a, id_a, mut on_a) = replica(metered(&dir_a), &dir_a, &url).await;
    let (b, id_b, mut on_b) = replica(metered(&dir_b), &dir_b, &url).await;
    // A second client stream on B: A has one, B two, each one relay.
    let mut also_on_b = Subscription::open(b.channel().await, Watch::default()).await;
    also_on_b.next().await;

    // One hold on each replica, each shown on the other: the relays are up.
    // (Each stream is read in the order its events come.)
    let (_probe_a, pause_a) = holding(&a, &mut on_a, "h1").await;
    dap::next_pause(&mut on_b, &pause_a.session_id).await;
    let (_probe_b, pause_b) = holding(&b, &mut on_b, "h2").await;
    dap::next_pause(&mut on_a, &pause_b.session_id).await;
    assert_eq!(
        (pause_a.replica_id.as_str(), pause_b.replica_id.as_str()),
        (id_a.as_str(), id_b.as_str())
    );

    // Exports made after the relays were up: two more from each replica.
    let seen = receiver.received().exports;
    let got = receiver
        .wait_for(
            "two more exports of each replica, each pause pending",
            |r| {
                r.exports >= seen + 4
                    && on(r, "stepd.pauses.pending", &id_a, &[]) == 1.0
                    && on(r, "stepd.pauses.pending", &id_b, &[]) == 1.0
            },
        )
        .await;
    for (id, subscribers) in [(&id_a, 1.0), (&id_b, 2.0)] {
        assert_eq!(on(&got, "stepd.sessions", id, &[]), 1.0, "{id}: {got:#?}");
        assert_eq!(on(&got, "stepd.probes.connected", id, &[]), 1.0, "{id}");
        assert_eq!(on(&got, "stepd.subscribers", id, &[]), subscribers, "{id}");
    }
    // Summed over the replicas: the cluster's two sessions, two pauses,
    // three client streams.
    assert_eq!(
        got.value("stepd.sessions", &[]).map(|v| v.number()),
        Some(2.0)
    );
    assert_eq!(
        got.value("stepd.pauses.pending", &[]).map(|v| v.number()),
        Some(2.0)
    );
    assert_eq!(
        got.value("stepd.subscribers", &[]).map(|v| v.number()),
        Some(3.0)
    );

    // Both answered on B: each command is counted where it was carried out.
    for pause in [&pause_a, &pause_b] {
        SessionServiceClient::new(b.channel().await)
            .send_debug_input(send_debug_input(&pause.key))
            .await
            .unwrap();
    }
    let continued = [("stepd.command.kind", "CONTINUE")];
    let got = receiver
        .wait_for("the answers counted", |r| {
            on(r, "stepd.commands", &id_a, &continued) == 1.0
                && on(r, "stepd.commands", &id_b, &continued) == 1.0
                && on(r, "stepd.pauses.pending", &id_a, &[]) == 0.0
                && on(r, "stepd.pauses.pending", &id_b, &[]) == 0.0
        })
        .await;
    assert_eq!(
        got.value("stepd.commands", &continued).map(|v| v.number()),
        Some(2.0)
    );
    a.stop().await;
    b.stop().await;
}
