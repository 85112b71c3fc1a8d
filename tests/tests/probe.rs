//! ProbeService end to end, with the test itself as the instrumented program:
//! arming, holds, every answer the probe can get, evaluations, hold limits and
//! a probe that goes away while held.

use std::time::Duration;

use prost_types::{Value, value::Kind};
use stepd_e2e::dap::answer;
use stepd_e2e::probe::{Probe, next};
use stepd_e2e::{DEADLINE, Daemon, Subscription, dap, reason, watched};
use stepd_proto::v1::{
    BreakpointSpec, CommandKind, ConnectResponse, ContinueCommand, EndReason, EvalCommand,
    EvalResult, GetSessionRequest, Hit, InjectCommand, ListBreakpointsRequest, NextCommand,
    PointInfo, ProbeMatch, ProbeMode, Reports, ResumeDecision, SkipCommand, StepOutCommand,
    UpdateBreakpointRequest, Watch, Withdraw, breakpoint_service_client::BreakpointServiceClient,
    breakpoint_spec::Location, connect_request::Message as In, connect_response::Message as Out,
    debug_command::Command, event::Payload, inject_command::Replacement,
};
use tonic::{Code, Streaming};

fn string(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

fn object(pairs: &[(&str, Value)]) -> Value {
    Value {
        kind: Some(Kind::StructValue(prost_types::Struct {
            fields: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        })),
    }
}

fn probe_spec(kind: &str, glob: &str) -> BreakpointSpec {
    BreakpointSpec {
        location: Some(Location::Probe(ProbeMatch {
            point_kind: kind.into(),
            name_glob: glob.into(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

#[tokio::test]
async fn arming_follows_breakpoints_and_holds_are_answered() {
    let (daemon, mut sub) = watched().await;
    let (mut probe, armed) = Probe::connect(&daemon, &[("agent", "main")]).await;
    assert_eq!(armed.mode, ProbeMode::Breakpoints as i32);
    assert!(armed.matchers.is_empty());
    let started = sub
        .wait_for("session_started", |e| {
            matches!(e.payload, Some(Payload::SessionStarted(_)))
        })
        .await;
    assert_eq!(started.session_id, probe.session_id);

    // A breakpoint on one tool arms the probe at once.
    let mut bash = probe_spec("tool_call", "Bash");
    bash.condition = "value.cmd contains \"rm\"".into();
    let bp = dap::add_breakpoint(&daemon, bash).await;
    let Out::Armed(armed) = next(&mut probe.rx).await else {
        panic!("expected Armed")
    };
    assert_eq!(armed.matchers.len(), 1);
    assert_eq!(armed.matchers[0].breakpoint_id, bp);
    assert_eq!(armed.matchers[0].name_glob, "Bash");
    assert_eq!(armed.matchers[0].condition, "value.cmd contains \"rm\"");

    // The probe holds; every subscriber sees the pause.
    let mut hit = Hit {
        hit_id: "h1".into(),
        point: Some(PointInfo {
            kind: "tool_call".into(),
            name: "Bash".into(),
            payload: Some(object(&[("cmd", string("rm -rf build"))])),
            editable: true,
            type_hint: "dict".into(),
            scope_path: vec!["turn".into()],
            ..Default::default()
        }),
        coor: vec![0, 2],
        breakpoint_ids: vec![bp.clone()],
        ..Default::default()
    };
    probe.send(In::Hit(hit.clone())).await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    assert_eq!(pause.point.as_ref().unwrap().name, "Bash");
    assert_eq!(pause.coor, [0, 2]);
    assert_eq!(pause.breakpoint_ids, std::slice::from_ref(&bp));
    for kind in [
        CommandKind::Skip,
        CommandKind::Inject,
        CommandKind::Eval,
        CommandKind::Next,
    ] {
        assert!(pause.input_type.contains(&(kind as i32)), "{kind:?}");
    }

    // An injected value that does not fit is refused; the pause stays.
    let err = answer(
        &daemon,
        &pause.key,
        Command::Inject(InjectCommand {
            replacement: Some(Replacement::Value(string("not a dict"))),
        }),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(reason(&err), "INVALID_VALUE");
    // It is an eval_error too, and the pause is re-prompted as it was.
    let again = dap::next_pause(&mut sub, &probe.session_id).await;
    assert_eq!(again.key, pause.key);
    assert!(again.revision > pause.revision);
    // A fitting one goes to the program.
    let edited = object(&[("cmd", string("ls build"))]);
    answer(
        &daemon,
        &pause.key,
        Command::Inject(InjectCommand {
            replacement: Some(Replacement::Value(edited.clone())),
        }),
    )
    .await
    .unwrap();
    let Out::Resume(resume) = next(&mut probe.rx).await else {
        panic!("expected Resume")
    };
    assert_eq!(resume.hit_id, "h1");
    assert_eq!(resume.decision, ResumeDecision::Replace as i32);
    assert_eq!(resume.value, Some(edited));
    assert_eq!(resume.armed.unwrap().mode, ProbeMode::Breakpoints as i32);

    // SKIP.
    hit.hit_id = "h2".into();
    probe.send(In::Hit(hit.clone())).await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    answer(&daemon, &pause.key, Command::Skip(SkipCommand {}))
        .await
        .unwrap();
    let Out::Resume(resume) = next(&mut probe.rx).await else {
        panic!("expected Resume")
    };
    assert_eq!(resume.decision, ResumeDecision::Skip as i32);

    // NEXT arms step mode; OUT arms the depth of the held point.
    hit.hit_id = "h3".into();
    probe.send(In::Hit(hit.clone())).await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    answer(&daemon, &pause.key, Command::Next(NextCommand {}))
        .await
        .unwrap();
    let Out::Resume(resume) = next(&mut probe.rx).await else {
        panic!("expected Resume")
    };
    assert_eq!(resume.armed.unwrap().mode, ProbeMode::Step as i32);
    hit.hit_id = "h4".into();
    probe.send(In::Hit(hit.clone())).await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    answer(
        &daemon,
        &pause.key,
        Command::StepOut(StepOutCommand { force: true }),
    )
    .await
    .unwrap();
    let Out::Resume(resume) = next(&mut probe.rx).await else {
        panic!("expected Resume")
    };
    let armed = resume.armed.unwrap();
    assert_eq!(armed.mode, ProbeMode::Depth as i32);
    assert_eq!(armed.depth, 1);
    assert!(!armed.honour_breakpoints);

    // EVAL goes to the probe and its answer comes back as debug_value.
    hit.hit_id = "h5".into();
    probe.send(In::Hit(hit.clone())).await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    let evaluating = answer(
        &daemon,
        &pause.key,
        Command::Eval(EvalCommand {
            code: "len(args)".into(),
        }),
    );
    let evaluating_at_probe = async {
        let Out::Eval(eval) = next(&mut probe.rx).await else {
            panic!("expected Eval")
        };
        assert_eq!(eval.hit_id, "h5");
        assert_eq!(eval.code, "len(args)");
        probe
            .send(In::EvalResult(EvalResult {
                eval_id: eval.eval_id,
                value: "3".into(),
                ..Default::default()
            }))
            .await;
    };
    let (evaluated, ()) = tokio::join!(evaluating, evaluating_at_probe);
    let evaluated = evaluated.unwrap().pause.unwrap();
    assert_eq!(evaluated.debug_value.unwrap().text, "3");
    answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    daemon.stop().await;
}

#[tokio::test]
async fn reports_become_events_and_drops_are_never_silent() {
    let (daemon, mut sub) = watched().await;
    let (probe, _) = Probe::connect(&daemon, &[]).await;
    let report = |name: &str| stepd_proto::v1::ObservedReport {
        kind: "skill_loaded".into(),
        name: name.into(),
        value: Some(string("loaded")),
        ..Default::default()
    };
    probe
        .send(In::Reports(Reports {
            observed: vec![report("pdf"), report("xlsx"), report("docx")],
            enlighten: vec![stepd_proto::v1::EnlightenReport {
                value: "three skills".into(),
                coor: vec![0],
                ..Default::default()
            }],
            dropped: 7,
            ..Default::default()
        }))
        .await;
    let first = sub
        .wait_for("observed", |e| {
            matches!(e.payload, Some(Payload::Observed(_)))
        })
        .await;
    // One batch becomes consecutive events in the order sent, observed
    // before enlighten, and the gap for the drops after them.
    let mut events = vec![first];
    for _ in 0..4 {
        events.push(sub.next().await);
    }
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    let expected: Vec<u64> = (0..5).map(|i| events[0].seq + i).collect();
    assert_eq!(seqs, expected, "nothing lands between a batch's events");
    let names: Vec<&str> = events[..3]
        .iter()
        .map(|e| match &e.payload {
            Some(Payload::Observed(o)) => o.name.as_str(),
            other => panic!("expected an observed event, got {other:?}"),
        })
        .collect();
    assert_eq!(names, ["pdf", "xlsx", "docx"]);
    assert!(
        matches!(events[3].payload, Some(Payload::Enlighten(_))),
        "{:?}",
        events[3]
    );
    let Some(Payload::Gap(gap)) = &events[4].payload else {
        panic!("expected a gap for the drops, got {:?}", events[4])
    };
    assert!(gap.reason.contains('7'), "{}", gap.reason);
    daemon.stop().await;
}

#[tokio::test]
async fn a_hold_has_a_limit() {
    let daemon = Daemon::start(&["--hold-limit", "300ms"]).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    let (mut probe, _) = Probe::connect(&daemon, &[]).await;
    probe.hit("h1", "prompt", "user", string("hi"), &[]).await;
    dap::next_pause(&mut sub, &probe.session_id).await;
    let Out::Resume(resume) = next(&mut probe.rx).await else {
        panic!("expected Resume")
    };
    assert_eq!(resume.decision, ResumeDecision::Continue as i32);
    let resolved = sub
        .wait_for("pause_resolved", |e| {
            matches!(e.payload, Some(Payload::PauseResolved(_)))
        })
        .await;
    let Some(Payload::PauseResolved(r)) = resolved.payload else {
        unreachable!()
    };
    assert_eq!(r.by, "hold-limit");
    daemon.stop().await;
}

#[tokio::test]
async fn a_probe_that_goes_away_while_held_ends_its_session() {
    let (daemon, mut sub) = watched().await;
    let (probe, _) = Probe::connect(&daemon, &[]).await;
    probe
        .hit("h1", "tool_call", "Bash", string("x"), &["turn"])
        .await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    let session_id = probe.session_id.clone();
    drop(probe);
    let resolved = sub
        .wait_for("pause_resolved", |e| {
            matches!(e.payload, Some(Payload::PauseResolved(_)))
        })
        .await;
    let Some(Payload::PauseResolved(r)) = resolved.payload else {
        unreachable!()
    };
    assert_eq!(r.key, pause.key);
    assert_eq!(r.by, "disconnect");
    assert_eq!(r.command, CommandKind::Unspecified as i32);
    let ended = dap::ended(&mut sub, &session_id).await;
    let Some(Payload::SessionEnded(end)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(end.reason, EndReason::ProbeDisconnected as i32);
    // Nobody answered it: the pause ended with its session.
    let err = answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "SESSION_ENDED");
    daemon.stop().await;
}

#[tokio::test]
async fn a_withdrawn_hold_resolves_and_cannot_be_answered() {
    let (daemon, mut sub) = watched().await;
    let (mut probe, _) = Probe::connect(&daemon, &[]).await;
    // A Withdraw for a hit that is not held is ignored.
    probe
        .send(In::Withdraw(Withdraw {
            hit_id: "nothing".into(),
        }))
        .await;
    probe
        .hit("h1", "tool_call", "Bash", string("x"), &["turn"])
        .await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;

    // The program gives up while an EVAL is in flight at the hold.
    let evaluating = answer(
        &daemon,
        &pause.key,
        Command::Eval(EvalCommand {
            code: "1 + 1".into(),
        }),
    );
    let withdrawing = async {
        let Out::Eval(eval) = next(&mut probe.rx).await else {
            panic!("expected Eval")
        };
        assert_eq!(eval.hit_id, "h1");
        probe
            .send(In::Withdraw(Withdraw {
                hit_id: "h1".into(),
            }))
            .await;
    };
    let (evaluated, ()) = tokio::join!(evaluating, withdrawing);
    assert_eq!(reason(&evaluated.unwrap_err()), "PAUSE_NOT_FOUND");
    let resolved = sub
        .wait_for(
            "pause_resolved",
            |e| matches!(&e.payload, Some(Payload::PauseResolved(r)) if r.key == pause.key),
        )
        .await;
    let Some(Payload::PauseResolved(r)) = resolved.payload else {
        unreachable!()
    };
    assert_eq!(r.by, "withdrawn");
    assert_eq!(r.command, CommandKind::Unspecified as i32);
    // Nobody answered it, so it is not ALREADY_ANSWERED: it is gone.
    let err = answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "PAUSE_NOT_FOUND");

    // No Resume went to the probe for h1: the next one is for the next hold,
    // and the session goes on as before.
    probe
        .hit("h2", "tool_call", "Bash", string("y"), &["turn"])
        .await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    let Out::Resume(resume) = next(&mut probe.rx).await else {
        panic!("expected Resume")
    };
    assert_eq!(resume.hit_id, "h2");
    daemon.stop().await;
}

#[tokio::test]
async fn probe_conditions_are_checked_when_added() {
    let (daemon, _sub) = watched().await;
    let mut bad = probe_spec("tool_call", "*");
    bad.condition = "value.cmd === 1".into();
    let err = stepd_proto::v1::breakpoint_service_client::BreakpointServiceClient::new(
        daemon.channel().await,
    )
    .add_breakpoint(stepd_proto::v1::AddBreakpointRequest { spec: Some(bad) })
    .await
    .unwrap_err();
    assert_eq!(stepd_e2e::violated_fields(&err), ["spec.condition"]);
    let _ = Duration::ZERO;
    daemon.stop().await;
}

#[tokio::test]
async fn a_pause_request_arms_step_mode() {
    let (daemon, _sub) = watched().await;
    let (mut probe, _) = Probe::connect(&daemon, &[]).await;
    let id = probe.session_id.clone();
    let daemon_addr = daemon.addr.clone();
    let pausing = tokio::spawn(async move {
        let channel = tonic::transport::Channel::from_shared(format!("http://{daemon_addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        stepd_proto::v1::session_service_client::SessionServiceClient::new(channel)
            .pause(stepd_proto::v1::PauseRequest {
                session_id: id,
                ..Default::default()
            })
            .await
    });
    let Out::Armed(armed) = next(&mut probe.rx).await else {
        panic!("expected Armed")
    };
    assert_eq!(armed.mode, ProbeMode::Step as i32);
    probe
        .hit("h1", "model_request", "main", string("q"), &["turn"])
        .await;
    let state = pausing.await.unwrap().unwrap().into_inner().state.unwrap();
    assert_eq!(state.pause.unwrap().point.unwrap().kind, "model_request");
    daemon.stop().await;
}

#[tokio::test]
async fn a_held_value_opens_in_the_inspector() {
    use stepd_proto::v1::{
        InspectRequest, InspectSource, PushRequest, inspect_source::Source,
        inspector_service_client::InspectorServiceClient, render_item::Item,
    };
    let (daemon, mut sub) = watched().await;
    let (probe, _) = Probe::connect(&daemon, &[]).await;
    let args = object(&[
        ("cmd", string("ls")),
        (
            "env",
            object(&[("HOME", string("/home/agent")), ("TERM", string("xterm"))]),
        ),
    ]);
    probe.hit("h1", "tool_call", "Bash", args, &["turn"]).await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    assert!(pause.input_type.contains(&(CommandKind::Inspect as i32)));
    let mut inspector = InspectorServiceClient::new(daemon.channel().await);
    let root = inspector
        .inspect(InspectRequest {
            session_id: probe.session_id.clone(),
            source: Some(InspectSource {
                source: Some(Source::PauseValue(pause.key.clone())),
            }),
            config: None,
        })
        .await
        .unwrap()
        .into_inner()
        .rendering
        .unwrap();
    let env = root
        .items
        .iter()
        .find_map(|i| match &i.item {
            Some(Item::Value(v)) if v.repr.contains("HOME") => Some(v.idx),
            _ => None,
        })
        .expect("the nested object is a navigable child");
    let pushed = inspector
        .push(PushRequest {
            inspector_id: root.inspector_id.clone(),
            idx: env,
        })
        .await
        .unwrap()
        .into_inner()
        .rendering
        .unwrap();
    assert!(pushed.path.contains("env"), "{}", pushed.path);
    let texts: Vec<String> = pushed
        .items
        .iter()
        .filter_map(|i| match &i.item {
            Some(Item::Value(v)) => Some(v.repr.clone()),
            Some(Item::Text(t)) => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert!(texts.iter().any(|t| t.contains("/home/agent")), "{texts:?}");
    // INSPECT as a debug input puts the rendering into the pause.
    let inspected = answer(&daemon, &pause.key, Command::Inspect(Default::default()))
        .await
        .unwrap()
        .pause
        .unwrap();
    assert!(inspected.inspect.is_some());
    daemon.stop().await;
}

#[tokio::test]
async fn stepctl_sends_here_with_a_probe_coordinate() {
    let (daemon, mut sub) = watched().await;
    let (mut probe, _) = Probe::connect(&daemon, &[]).await;
    probe
        .hit("h1", "tool_call", "Bash", string("x"), &["turn"])
        .await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    let out = std::process::Command::new(stepd_e2e::stepctl_bin())
        .args(["input", &pause.key, "here", "@0,5"])
        .env("STEPD_ADDR", &daemon.addr)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let Out::Resume(resume) = next(&mut probe.rx).await else {
        panic!("expected Resume")
    };
    let armed = resume.armed.unwrap();
    assert_eq!(armed.target_coor, [0, 5]);
    assert!(armed.honour_breakpoints);
    daemon.stop().await;
}

#[tokio::test]
async fn hit_counts_are_kept_across_a_restart() {
    let (mut daemon, mut sub) = watched().await;
    let (mut probe, _) = Probe::connect(&daemon, &[]).await;
    let bp = dap::add_breakpoint(&daemon, probe_spec("tool_call", "*")).await;
    let Out::Armed(_) = next(&mut probe.rx).await else {
        panic!("expected Armed")
    };
    for n in 0..3 {
        probe
            .send(In::Hit(Hit {
                hit_id: format!("h{n}"),
                point: Some(PointInfo {
                    kind: "tool_call".into(),
                    name: "Bash".into(),
                    ..Default::default()
                }),
                breakpoint_ids: vec![bp.clone()],
                ..Default::default()
            }))
            .await;
        let pause = dap::next_pause(&mut sub, &probe.session_id).await;
        answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
            .await
            .unwrap();
        let Out::Resume(_) = next(&mut probe.rx).await else {
            panic!("expected Resume")
        };
    }
    // Hits reach the store in batches; an update in between still reports them.
    let mut breakpoints = BreakpointServiceClient::new(daemon.channel().await);
    let updated = breakpoints
        .update_breakpoint(UpdateBreakpointRequest {
            id: bp.clone(),
            spec: Some(BreakpointSpec {
                condition: "value != null".into(),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["condition".into()],
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .breakpoint
        .unwrap();
    assert_eq!(updated.hit_count, 3);

    drop(probe);
    let dir = daemon.owned_dir.take();
    let data_dir = daemon.data_dir.clone();
    daemon.stop().await;
    let again = Daemon::start_in(&data_dir, &[]).await;
    let listed = BreakpointServiceClient::new(again.channel().await)
        .list_breakpoints(ListBreakpointsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .breakpoints;
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].hit_count, 3,
        "counted hits are written at shutdown"
    );
    again.stop().await;
    drop(dir);
}

#[tokio::test]
async fn a_reconnecting_probe_names_its_previous_session() {
    let (daemon, mut sub) = watched().await;
    let (first, _) = Probe::connect(&daemon, &[]).await;
    // The program saw its stream fail before the daemon did: the old session
    // is still open when the probe comes back.
    let (second, _) = Probe::connect_with(&daemon, &[], &first.session_id).await;
    let ended = sub
        .wait_for("the old session's end", |e| {
            e.session_id == first.session_id && matches!(e.payload, Some(Payload::SessionEnded(_)))
        })
        .await;
    let Some(Payload::SessionEnded(ended)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(ended.reason, EndReason::ProbeDisconnected as i32);
    assert!(
        ended.detail.contains(&second.session_id),
        "{}",
        ended.detail
    );
    let session = |id: &str| {
        let daemon = &daemon;
        let id = id.to_owned();
        async move {
            dap::sessions(daemon)
                .await
                .get_session(GetSessionRequest { session_id: id })
                .await
                .unwrap()
                .into_inner()
                .session
                .unwrap()
        }
    };
    assert_eq!(
        session(&second.session_id).await.previous_session_id,
        first.session_id
    );
    // An id the daemon never saw (e.g. from before a restart) is not named.
    let (third, _) = Probe::connect_with(&daemon, &[], "no-such-session").await;
    assert_eq!(session(&third.session_id).await.previous_session_id, "");
    drop((first, second, third));
    daemon.stop().await;
}

/// A Hit naming `breakpoint`, as a probe armed with it sends.
fn hit_of(id: &str, breakpoint: &str) -> In {
    In::Hit(Hit {
        hit_id: id.into(),
        point: Some(PointInfo {
            kind: "tool_call".into(),
            name: "Bash".into(),
            ..Default::default()
        }),
        breakpoint_ids: vec![breakpoint.into()],
        ..Default::default()
    })
}

#[tokio::test]
async fn max_hits_and_a_breakpoints_own_hold_limit_apply_to_probes() {
    let (daemon, mut sub) = watched().await;
    let (mut probe, _) = Probe::connect(&daemon, &[]).await;
    let mut twice = probe_spec("tool_call", "Bash");
    twice.max_hits = 2;
    twice.hold_limit = Some(prost_types::Duration {
        seconds: 0,
        nanos: 200_000_000,
    });
    let bp = dap::add_breakpoint(&daemon, twice).await;
    let Out::Armed(armed) = next(&mut probe.rx).await else {
        panic!("expected Armed")
    };
    assert_eq!(armed.matchers.len(), 1);

    // First hit: answered by hand.
    probe.send(hit_of("h1", &bp)).await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    let Out::Resume(_) = next(&mut probe.rx).await else {
        panic!("expected Resume")
    };
    // Second hit: nobody answers; the breakpoint's own 200 ms limit (the
    // daemon's is 30 minutes) lets it go.
    probe.send(hit_of("h2", &bp)).await;
    dap::next_pause(&mut sub, &probe.session_id).await;
    let resolved = sub
        .wait_for("pause_resolved", |e| {
            matches!(e.payload, Some(Payload::PauseResolved(_)))
        })
        .await;
    let Some(Payload::PauseResolved(r)) = resolved.payload else {
        unreachable!()
    };
    assert_eq!(r.by, "hold-limit");
    // The second hit spent it: the probe is disarmed, and a third hit from a
    // probe that had not heard yet holds nothing.
    let (mut resumed, mut disarmed) = (false, false);
    while !(resumed && disarmed) {
        match next(&mut probe.rx).await {
            Out::Armed(a) => disarmed |= a.matchers.is_empty(),
            Out::Resume(r) => {
                assert_eq!(r.hit_id, "h2");
                assert_eq!(r.decision, ResumeDecision::Continue as i32);
                resumed = true;
                disarmed |= r.armed.is_some_and(|a| a.matchers.is_empty());
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    probe.send(hit_of("h3", &bp)).await;
    let Out::Resume(third) = next(&mut probe.rx).await else {
        panic!("expected Resume")
    };
    assert_eq!(third.hit_id, "h3");
    assert_eq!(third.decision, ResumeDecision::Continue as i32);
    daemon.stop().await;
}

/// Waits for the next message that is not an Armed (pushed whenever arming changes).
async fn next_skipping_armed(rx: &mut Streaming<ConnectResponse>) -> Out {
    loop {
        match next(rx).await {
            Out::Armed(_) => continue,
            other => return other,
        }
    }
}

#[tokio::test]
async fn a_refused_command_leaves_the_hold_answerable() {
    let (daemon, mut sub) = watched().await;
    let (mut probe, _) = Probe::connect(&daemon, &[]).await;
    probe
        .hit("h1", "tool_call", "Bash", string("x"), &["turn"])
        .await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    // HERE needs a coordinate at a probe; a line or nothing is refused.
    for here in [
        stepd_proto::v1::HereCommand::default(),
        stepd_proto::v1::HereCommand {
            line: 7,
            ..Default::default()
        },
    ] {
        let err = answer(&daemon, &pause.key, Command::Here(here))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    }
    // A command outside input_type (no locals were reported).
    let err = answer(
        &daemon,
        &pause.key,
        Command::Locals(stepd_proto::v1::LocalsCommand {}),
    )
    .await
    .unwrap_err();
    assert_eq!(reason(&err), "INVALID_COMMAND");
    // The hold is exactly as it was: still listed, and the next answer works.
    let listed = dap::sessions(&daemon)
        .await
        .list_pauses(stepd_proto::v1::ListPausesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .pauses;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].revision, pause.revision);
    answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    let Out::Resume(resume) = next(&mut probe.rx).await else {
        panic!("expected Resume")
    };
    assert_eq!(resume.hit_id, "h1");
    daemon.stop().await;
}

#[tokio::test]
async fn a_failed_eval_fails_the_call_and_re_prompts_the_hold() {
    let (daemon, mut sub) = watched().await;
    let (mut probe, _) = Probe::connect(&daemon, &[]).await;
    probe.hit("h1", "prompt", "user", string("42"), &[]).await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    let evaluating = answer(
        &daemon,
        &pause.key,
        Command::Eval(EvalCommand {
            code: "undefined_name".into(),
        }),
    );
    let failing = async {
        let Out::Eval(eval) = next(&mut probe.rx).await else {
            panic!("expected Eval")
        };
        probe
            .send(In::EvalResult(EvalResult {
                eval_id: eval.eval_id,
                error: "NameError: name 'undefined_name' is not defined".into(),
                ..Default::default()
            }))
            .await;
    };
    let (evaluated, ()) = tokio::join!(evaluating, failing);
    let err = evaluated.unwrap_err();
    assert_eq!(reason(&err), "ADAPTER_ERROR");
    assert!(err.message().contains("NameError"), "{}", err.message());
    let error = sub
        .wait_for("eval_error", |e| {
            matches!(e.payload, Some(Payload::EvalError(_)))
        })
        .await;
    let Some(Payload::EvalError(error)) = error.payload else {
        unreachable!()
    };
    assert_eq!(error.key, pause.key);
    // Re-prompted: same key, higher revision, the held value unchanged.
    let again = dap::next_pause(&mut sub, &probe.session_id).await;
    assert_eq!(again.key, pause.key);
    assert!(again.revision > pause.revision);
    assert_eq!(again.debug_value, pause.debug_value);
    answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    daemon.stop().await;
}

fn trace_batch(points: &[&str]) -> In {
    In::Reports(Reports {
        trace: points
            .iter()
            .enumerate()
            .map(|(i, name)| stepd_proto::v1::TraceReport {
                point: Some(PointInfo {
                    kind: "tool_call".into(),
                    name: (*name).into(),
                    ..Default::default()
                }),
                coor: vec![i32::try_from(i).unwrap()],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })
}

#[tokio::test]
async fn trace_counts_steps_across_batches_and_holds_at_max_steps() {
    let (daemon, mut sub) = watched().await;
    let (mut probe, _) = Probe::connect(&daemon, &[]).await;
    probe.hit("h1", "prompt", "user", string("hi"), &[]).await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    answer(
        &daemon,
        &pause.key,
        Command::Trace(stepd_proto::v1::TraceCommand { max_steps: 3 }),
    )
    .await
    .unwrap();
    let Out::Resume(resume) = next(&mut probe.rx).await else {
        panic!("expected Resume")
    };
    assert_eq!(resume.armed.unwrap().mode, ProbeMode::Trace as i32);
    // Two batches: steps are numbered across them, and the third step is the last.
    probe.send(trace_batch(&["Read", "Grep"])).await;
    probe.send(trace_batch(&["Bash", "Edit"])).await;
    let mut steps = Vec::new();
    while steps.len() < 3 {
        let event = sub
            .wait_for("trace", |e| matches!(e.payload, Some(Payload::Trace(_))))
            .await;
        let Some(Payload::Trace(trace)) = event.payload else {
            unreachable!()
        };
        assert_eq!(trace.key, pause.key, "a trace step names its pause");
        let point = trace.point.expect("a probe trace step names its point");
        steps.push((trace.step, point.name));
    }
    assert_eq!(
        steps,
        [
            (1, "Read".into()),
            (2, "Grep".into()),
            (3, "Bash".to_string())
        ]
    );
    // At the limit the probe is put in step mode, so its next point holds.
    let Out::Armed(armed) = next(&mut probe.rx).await else {
        panic!("expected Armed")
    };
    assert_eq!(armed.mode, ProbeMode::Step as i32);
    let told = sub
        .wait_for("the notification about the point after the limit", |e| {
            matches!(&e.payload, Some(Payload::Notification(n)) if n.message.contains("1 more point"))
        })
        .await;
    assert_eq!(told.session_id, probe.session_id);
    daemon.stop().await;
}

#[tokio::test]
async fn quit_ends_a_probe_session_as_quit() {
    let (daemon, mut sub) = watched().await;
    let (mut probe, _) = Probe::connect(&daemon, &[]).await;
    probe.hit("h1", "prompt", "user", string("hi"), &[]).await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    answer(
        &daemon,
        &pause.key,
        Command::Quit(stepd_proto::v1::QuitCommand {}),
    )
    .await
    .unwrap();
    let Out::Resume(resume) = next_skipping_armed(&mut probe.rx).await else {
        panic!("expected Resume")
    };
    assert_eq!(resume.decision, ResumeDecision::Stop as i32);
    // The program stops as told and goes away.
    let session_id = probe.session_id.clone();
    drop(probe);
    let ended = dap::ended(&mut sub, &session_id).await;
    let Some(Payload::SessionEnded(end)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(end.reason, EndReason::Quit as i32);
    let err = answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "ALREADY_ANSWERED");
    daemon.stop().await;
}

#[tokio::test]
async fn an_ended_session_is_forgotten_everywhere_at_once() {
    let (daemon, mut sub) = watched().await;
    let mut ids = Vec::new();
    // The daemon remembers 64 ended sessions; the 65th to end pushes out the first.
    for _ in 0..65 {
        let (probe, _) = Probe::connect(&daemon, &[]).await;
        let id = probe.session_id.clone();
        drop(probe);
        dap::ended(&mut sub, &id).await;
        ids.push(id);
    }
    let sessions = dap::sessions(&daemon).await;
    let first = &ids[0];
    let err = sessions
        .clone()
        .get_session(GetSessionRequest {
            session_id: first.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "SESSION_NOT_FOUND");
    // The registry forgets it with the view, so every call agrees.
    let outcome = tokio::time::timeout(DEADLINE, async {
        loop {
            let read = sessions
                .clone()
                .read_output(stepd_proto::v1::ReadOutputRequest {
                    session_id: first.clone(),
                    ..Default::default()
                })
                .await;
            match read {
                Err(err) => return err,
                Ok(_) => tokio::task::yield_now().await,
            }
        }
    })
    .await
    .expect("ReadOutput forgets the session too");
    assert_eq!(reason(&outcome), "SESSION_NOT_FOUND");
    // The second one is still known to both.
    sessions
        .clone()
        .get_session(GetSessionRequest {
            session_id: ids[1].clone(),
        })
        .await
        .unwrap();
    sessions
        .clone()
        .read_output(stepd_proto::v1::ReadOutputRequest {
            session_id: ids[1].clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    daemon.stop().await;
}

#[tokio::test]
async fn a_redacted_key_never_leaves_the_daemon_from_a_probe() {
    use stepd_proto::v1::{
        DisplayValue, InspectRequest, InspectSource, Local, inspect_source::Source,
        inspector_service_client::InspectorServiceClient,
    };
    let daemon = Daemon::start(&["--redact", "api_key"]).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    let (mut probe, _) = Probe::connect(&daemon, &[]).await;
    let bp = dap::add_breakpoint(&daemon, probe_spec("tool_call", "*")).await;
    let Out::Armed(_) = next(&mut probe.rx).await else {
        panic!("expected Armed")
    };
    let args = object(&[
        ("url", string("https://api.example.com")),
        ("API_KEY", string("sk-s3cr3t")),
        ("headers", object(&[("x-api_key", string("sk-s3cr3t"))])),
    ]);
    probe
        .send(In::Hit(Hit {
            hit_id: "h1".into(),
            point: Some(PointInfo {
                kind: "tool_call".into(),
                name: "http".into(),
                payload: Some(args),
                scope_path: vec!["turn".into()],
                ..Default::default()
            }),
            coor: vec![0, 1],
            breakpoint_ids: vec![bp],
            locals: vec![Local {
                name: "api_key".into(),
                value: Some(DisplayValue {
                    text: "'sk-s3cr3t'".into(),
                    r#type: "str".into(),
                    truncated: false,
                }),
            }],
            ..Default::default()
        }))
        .await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    assert_eq!(dap::local(&pause, "api_key"), "<redacted>");
    let root = InspectorServiceClient::new(daemon.channel().await)
        .inspect(InspectRequest {
            session_id: probe.session_id.clone(),
            source: Some(InspectSource {
                source: Some(Source::PauseValue(pause.key.clone())),
            }),
            config: None,
        })
        .await
        .unwrap()
        .into_inner();
    let evaluating = answer(
        &daemon,
        &pause.key,
        Command::Eval(EvalCommand {
            code: "api_key".into(),
        }),
    );
    let evaluating_at_probe = async {
        let Out::Eval(eval) = next(&mut probe.rx).await else {
            panic!("expected Eval")
        };
        probe
            .send(In::EvalResult(EvalResult {
                eval_id: eval.eval_id,
                value: "'sk-s3cr3t'".into(),
                ..Default::default()
            }))
            .await;
    };
    let (eval, ()) = tokio::join!(evaluating, evaluating_at_probe);
    let eval = eval.unwrap();
    let shown = format!("{pause:?}\n{root:?}\n{eval:?}");
    assert!(!shown.contains("s3cr3t"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
    daemon.stop().await;
}

#[tokio::test]
async fn a_hold_re_reported_while_the_old_stream_is_open_is_listed_once() {
    // One pause per identity: the re-report would be refused if the old
    // stream's pause were still there.
    let daemon = Daemon::start(&["--max-pauses-per-identity", "1"]).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    let breakpoint = dap::add_breakpoint(&daemon, probe_spec("tool_call", "Bash")).await;
    let (first, _) = Probe::connect(&daemon, &[]).await;
    first.send(hit_of("h1", &breakpoint)).await;
    let old = dap::next_pause(&mut sub, &first.session_id).await;
    // The program saw its stream fail before the daemon did.
    let (mut second, _) = Probe::connect_with(&daemon, &[], &first.session_id).await;
    let since = prost_types::Timestamp {
        seconds: old.created_at.as_ref().unwrap().seconds - 1,
        nanos: 0,
    };
    let mut again = hit_of("h1", &breakpoint);
    if let In::Hit(hit) = &mut again {
        hit.held_since = Some(since);
    }
    second.send(again).await;
    let new = dap::next_pause(&mut sub, &second.session_id).await;
    assert_eq!(new.original_id, "h1");
    assert_eq!(new.created_at, Some(since), "held since the first hold");
    let listed = dap::sessions(&daemon)
        .await
        .list_pauses(stepd_proto::v1::ListPausesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .pauses;
    assert_eq!(listed.len(), 1, "{listed:#?}");
    assert_eq!(listed[0].key, new.key);
    // Not a second hit of the breakpoint.
    let breakpoints = BreakpointServiceClient::new(daemon.channel().await)
        .list_breakpoints(ListBreakpointsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .breakpoints;
    assert_eq!(breakpoints[0].hit_count, 1);
    answer(&daemon, &new.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    let Out::Resume(resume) = next_skipping_armed(&mut second.rx).await else {
        panic!("a Resume")
    };
    assert_eq!(resume.hit_id, "h1");
    // A re-report past its hold limit (30 minutes by default) goes on at once.
    let mut late = hit_of("h2", &breakpoint);
    if let In::Hit(hit) = &mut late {
        hit.held_since = Some(prost_types::Timestamp {
            seconds: since.seconds - 7200,
            nanos: 0,
        });
    }
    second.send(late).await;
    let Out::Resume(resume) = next_skipping_armed(&mut second.rx).await else {
        panic!("a Resume")
    };
    assert_eq!(resume.hit_id, "h2");
    assert_eq!(resume.decision, ResumeDecision::Continue as i32);
    drop((first, second));
    daemon.stop().await;
}
