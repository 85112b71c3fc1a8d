//! The daemon's side of stepping from a request's own hold, with the test as
//! the instrumented program over a raw ProbeService stream: a hold stopped
//! only by breakpoints scoped to a request's baggage arms its step for that
//! request (`Armed.request_scope`), a hold of the step stays the request's,
//! and a point the probe says is outside that request holds only for its
//! own breakpoints. A hold of an unscoped breakpoint, and a Pause request,
//! arm the whole process as before.

use prost_types::{Value, value::Kind};
use stepd_e2e::dap::answer;
use stepd_e2e::probe::{Probe, next};
use stepd_e2e::{Subscription, dap, watched};
use stepd_proto::v1::{
    Armed, BaggageEntry, BreakpointAction, BreakpointSpec, ConnectResponse, ContinueAllCommand,
    ContinueCommand, Hit, NextCommand, PointInfo, ProbeMatch, ProbeMode, ResumeDecision,
    breakpoint_spec::Location, connect_request::Message as In, connect_response::Message as Out,
    debug_command::Command, event::Payload,
};
use tonic::Streaming;

fn ana() -> Vec<BaggageEntry> {
    vec![BaggageEntry {
        key: "debug-session".into(),
        value: "ana".into(),
    }]
}

fn on(name: &str, baggage: Vec<BaggageEntry>) -> BreakpointSpec {
    BreakpointSpec {
        location: Some(Location::Probe(ProbeMatch {
            point_kind: "tool_call".into(),
            name_glob: name.into(),
            baggage,
        })),
        ..Default::default()
    }
}

/// A `tool_call` point named `name`, reported with `ids`.
fn hit(id: &str, name: &str, ids: &[&str], outside: bool) -> In {
    In::Hit(Hit {
        hit_id: id.into(),
        point: Some(PointInfo {
            kind: "tool_call".into(),
            name: name.into(),
            payload: Some(Value {
                kind: Some(Kind::StringValue(name.into())),
            }),
            scope_path: vec!["turn".into()],
            ..Default::default()
        }),
        coor: vec![0, 1],
        breakpoint_ids: ids.iter().map(|s| s.to_string()).collect(),
        outside_request_scope: outside,
        ..Default::default()
    })
}

/// Adds a breakpoint and waits for the probe to be armed with it.
async fn add(daemon: &stepd_e2e::Daemon, probe: &mut Probe, spec: BreakpointSpec) -> String {
    let id = dap::add_breakpoint(daemon, spec).await;
    let Out::Armed(_) = next(&mut probe.rx).await else {
        panic!("expected Armed")
    };
    id
}

/// Holds `point`, answers the pause with `command` and returns the arming
/// its Resume carries.
async fn hold_and_answer(
    daemon: &stepd_e2e::Daemon,
    probe: &mut Probe,
    sub: &mut Subscription,
    point: In,
    command: Command,
) -> Armed {
    probe.send(point).await;
    let pause = dap::next_pause(sub, &probe.session_id).await;
    answer(daemon, &pause.key, command).await.unwrap();
    resume_armed(&mut probe.rx).await
}

async fn resume_armed(rx: &mut Streaming<ConnectResponse>) -> Armed {
    match next(rx).await {
        Out::Resume(resume) => resume.armed.expect("the arming after the answer"),
        other => panic!("expected Resume, got {other:?}"),
    }
}

#[tokio::test]
async fn a_step_from_a_requests_own_hold_is_armed_for_that_request_only() {
    let (daemon, mut sub) = watched().await;
    let (mut probe, _) = Probe::connect(&daemon, &[]).await;
    let scoped = add(&daemon, &mut probe, on("transfer", ana())).await;
    let unscoped = add(&daemon, &mut probe, on("read", Vec::new())).await;
    let mut log = on("audit", Vec::new());
    log.action = BreakpointAction::Log as i32;
    log.log_message = "audited {name}".into();
    let log = add(&daemon, &mut probe, log).await;

    // NEXT at a hold of the scoped breakpoint steps that request only.
    let next_ = || Command::Next(NextCommand {});
    let armed = hold_and_answer(
        &daemon,
        &mut probe,
        &mut sub,
        hit("h1", "transfer", &[&scoped], false),
        next_(),
    )
    .await;
    assert_eq!(armed.mode, ProbeMode::Step as i32);
    assert_eq!(armed.request_scope, ana());

    // Another request's point, at a LOG breakpoint: the step is not its,
    // so it goes on at once (logged), where the step would have held it.
    probe.send(hit("h2", "audit", &[&log], true)).await;
    match next(&mut probe.rx).await {
        Out::Resume(resume) => {
            assert_eq!(resume.hit_id, "h2");
            assert_eq!(resume.decision, ResumeDecision::Continue as i32);
        }
        other => panic!("expected the Resume of h2 at once, got {other:?}"),
    }
    sub.wait_for("the LOG line", |e| match &e.payload {
        Some(Payload::Output(o)) => o
            .chunk
            .as_ref()
            .is_some_and(|c| c.text.contains("audited audit")),
        _ => false,
    })
    .await;
    assert!(
        dap::pending_keys(&daemon, &probe.session_id)
            .await
            .is_empty()
    );

    // The request's own next point holds (no breakpoint there: the step),
    // and a step from it is still that request's.
    let armed = hold_and_answer(
        &daemon,
        &mut probe,
        &mut sub,
        hit("h3", "anything", &[], false),
        next_(),
    )
    .await;
    assert_eq!(armed.mode, ProbeMode::Step as i32);
    assert_eq!(armed.request_scope, ana());

    // CONTINUE_ALL at the request's hold quiets that request only, and says so.
    let armed = hold_and_answer(
        &daemon,
        &mut probe,
        &mut sub,
        hit("h4", "anything", &[], false),
        Command::ContinueAll(ContinueAllCommand {}),
    )
    .await;
    assert_eq!(armed.mode, ProbeMode::None as i32);
    assert_eq!(armed.request_scope, ana());
    sub.wait_for("the CONTINUE_ALL notice", |e| match &e.payload {
        Some(Payload::Notification(n)) => n.message.contains("debug-session=ana"),
        _ => false,
    })
    .await;

    // A hold of a breakpoint for every request steps the whole process.
    let armed = hold_and_answer(
        &daemon,
        &mut probe,
        &mut sub,
        hit("h5", "read", &[&unscoped], true),
        next_(),
    )
    .await;
    assert_eq!(armed.mode, ProbeMode::Step as i32);
    assert!(armed.request_scope.is_empty(), "{armed:?}");

    // So does one stopped by a scoped and an unscoped breakpoint together.
    let armed = hold_and_answer(
        &daemon,
        &mut probe,
        &mut sub,
        hit("h6", "transfer", &[&scoped, &unscoped], false),
        next_(),
    )
    .await;
    assert!(armed.request_scope.is_empty(), "{armed:?}");

    // CONTINUE is breakpoints mode, about no request.
    let armed = hold_and_answer(
        &daemon,
        &mut probe,
        &mut sub,
        hit("h7", "transfer", &[&scoped], false),
        Command::Resume(ContinueCommand {}),
    )
    .await;
    assert_eq!(armed.mode, ProbeMode::Breakpoints as i32);
    assert!(armed.request_scope.is_empty(), "{armed:?}");
    daemon.stop().await;
}
