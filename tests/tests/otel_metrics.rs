//! Metrics over OTLP end to end, against a real OTLP gRPC metrics receiver
//! started here (`stepd_e2e::otlp`, the collector protocol's own service):
//! after a probe hold and a DAP step under debugpy, every metric the daemon
//! exports arrives with the values the hold and the step imply; with only a
//! metrics endpoint named, no span is stamped.

use std::time::Instant;

use stepd_e2e::{
    DEADLINE, Daemon, Subscription, TempDir, dap, fixture,
    jaeger::command_without_otel,
    line_of,
    otlp::{MetricsReceiver, Value},
    probe::{arm, connect_probe, hold, next},
    source_spec,
};
use stepd_proto::v1::{
    ContinueCommand, GetStatusRequest, StepKind, Watch, connect_response::Message as Out,
    daemon_service_client::DaemonServiceClient, debug_command::Command,
};

/// A daemon exporting metrics to `receiver` every 200 ms, and nothing else.
async fn metered_daemon(dir: &TempDir, receiver: &MetricsReceiver) -> Daemon {
    let mut command = command_without_otel(dir.path());
    command
        .env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", receiver.endpoint())
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .env("OTEL_SERVICE_NAME", "stepd-metrics");
    Daemon::spawn(command, dir.path()).await
}

fn number(value: Option<Value>) -> f64 {
    value.map_or(f64::NAN, Value::number)
}

#[tokio::test]
async fn a_hold_and_a_step_show_in_the_exported_metrics() {
    let receiver = MetricsReceiver::start().await;
    let dir = TempDir::new("otel-metrics");
    let daemon = metered_daemon(&dir, &receiver).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;

    // A probe holds: one probe connected, one pause pending, its session
    // stopped, one subscriber.
    let mut probe = connect_probe(&daemon, "").await;
    let breakpoint = arm(&daemon, &mut probe, "Bash").await;
    hold(&probe, "h1", "Bash", &breakpoint, "").await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    assert_eq!(pause.trace_id, "", "no traces are exported");
    let held_from = Instant::now();
    let got = receiver
        .wait_for("the hold pending", |r| {
            number(r.value("stepd.pauses.pending", &[])) == 1.0
                && number(r.value(
                    "stepd.sessions",
                    &[
                        ("stepd.session.kind", "PROBE"),
                        ("stepd.session.state", "STOPPED"),
                    ],
                )) == 1.0
        })
        .await;
    assert_eq!(got.service, "stepd-metrics");
    assert_eq!(number(got.value("stepd.probes.connected", &[])), 1.0);
    assert_eq!(number(got.value("stepd.subscribers", &[])), 1.0);
    // The same counts GetStatus reports.
    let status = DaemonServiceClient::new(daemon.channel().await)
        .get_status(GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!((status.probes, status.pending_pauses), (1, 1));

    // Opened before it was seen, resolved after this answer was sent.
    let held_at_least = held_from.elapsed().as_secs_f64();
    dap::answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    let Out::Resume(_) = next(&mut probe.rx).await else {
        panic!("expected Resume")
    };
    let got = receiver
        .wait_for("the hold's duration", |r| {
            r.value(
                "stepd.pause.hold.duration",
                &[("stepd.pause.command", "CONTINUE")],
            )
            .is_some()
                && number(r.value("stepd.pauses.pending", &[])) == 0.0
        })
        .await;
    let Some(Value::Histogram { count, sum }) = got.value(
        "stepd.pause.hold.duration",
        &[
            ("stepd.pause.command", "CONTINUE"),
            ("stepd.pause.reason", "HOLD"),
        ],
    ) else {
        panic!("the hold duration is a histogram: {got:#?}")
    };
    assert_eq!(count, 1);
    assert!(
        sum >= held_at_least && sum < held_at_least + DEADLINE.as_secs_f64(),
        "held {sum} s, at least {held_at_least} s"
    );
    assert_eq!(
        number(got.value("stepd.commands", &[("stepd.command.kind", "CONTINUE")])),
        1.0
    );
    drop(probe);

    // A DAP step under debugpy: the Step is a NEXT command, its adapter
    // requests are timed by adapter and command.
    let program = fixture("python/loop.py");
    let path = program.to_str().unwrap();
    let line = line_of(&program, "step");
    dap::add_breakpoint(&daemon, source_spec(path, line)).await;
    let session = dap::launch(&daemon, "debugpy", path, &[])
        .await
        .session
        .unwrap();
    dap::next_pause(&mut sub, &session.id).await;
    let mut sessions = dap::sessions(&daemon).await;
    dap::step(&mut sessions, &session.id, StepKind::Over).await;
    let got = receiver
        .wait_for("the step", |r| {
            r.value(
                "stepd.dap.request.duration",
                &[("stepd.adapter", "debugpy"), ("stepd.dap.command", "next")],
            )
            .is_some()
                && number(r.value("stepd.commands", &[("stepd.command.kind", "NEXT")])) >= 1.0
        })
        .await;
    let Some(Value::Histogram { count, sum }) = got.value(
        "stepd.dap.request.duration",
        &[("stepd.adapter", "debugpy"), ("stepd.dap.command", "next")],
    ) else {
        panic!("DAP request durations are histograms: {got:#?}")
    };
    assert!(count >= 1 && sum > 0.0 && sum < DEADLINE.as_secs_f64() * count as f64);
    for command in ["initialize", "stackTrace", "setBreakpoints"] {
        assert!(
            got.value(
                "stepd.dap.request.duration",
                &[("stepd.dap.command", command)]
            )
            .is_some(),
            "{command} is timed: {:?}",
            got.names()
        );
    }
    // debugpy's session and the child session it asks for.
    assert!(number(got.value("stepd.sessions", &[("stepd.session.kind", "DAP")])) >= 1.0);
    // The step resolved the breakpoint's pause with NEXT.
    assert!(
        got.value(
            "stepd.pause.hold.duration",
            &[
                ("stepd.pause.command", "NEXT"),
                ("stepd.pause.reason", "BREAKPOINT")
            ],
        )
        .is_some(),
        "{got:#?}"
    );
    let published = number(got.value("stepd.events.published", &[]));
    assert!(published >= 6.0, "events published: {published}");
    for counter in ["stepd.events.dropped", "stepd.events.gaps"] {
        assert_eq!(number(got.value(counter, &[])), 0.0, "{counter}");
    }
    daemon.stop().await;
}
