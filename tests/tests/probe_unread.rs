//! A probe that stops reading its stream never loses an answer: while what
//! the daemon sent it sits unread, an answer to its hold is refused with
//! PROBE_NOT_READING and the pause stays; the arming it missed and the
//! answer given once it reads again reach it; a probe that never reads
//! again ends as PROBE_UNRESPONSIVE. Every kind of answer meets this the
//! same way: INJECT, EVAL, SKIP and the session's Continue are refused
//! alike, and a refused INJECT is not mistaken for a value the probe
//! rejected.

use prost_types::{Value, value::Kind};
use stepd_e2e::{
    DEADLINE, Daemon, Subscription,
    dap::{self, pending_keys},
    probe::{Probe, hello},
    reason,
};
use stepd_proto::v1::{
    BreakpointSpec, ConnectRequest, ContinueRequest, DebugCommand, DebugInput, EndReason,
    EvalCommand, Hello, Hit, InjectCommand, PointInfo, ProbeMatch, Resume, ResumeDecision,
    SendDebugInputRequest, Watch, breakpoint_spec::Location, connect_request::Message as In,
    connect_response::Message as Out, debug_command::Command, event::Payload,
    inject_command::Replacement, session_service_client::SessionServiceClient,
};
use tokio::sync::mpsc;

/// Duplicate hits the probe sends while it reads nothing: each is answered
/// with a refusal, together far more than the stream's queue and HTTP/2's
/// send buffer (400 KiB) hold.
const FILLER: usize = 20_000;

fn text(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

fn held_hit() -> Hit {
    Hit {
        hit_id: "held".into(),
        point: Some(PointInfo {
            kind: "tool_call".into(),
            name: "Bash".into(),
            payload: Some(text("ls")),
            editable: true,
            ..Default::default()
        }),
        coor: vec![0],
        ..Default::default()
    }
}

/// A duplicate of the held hit, refused by the daemon. Its payload makes
/// each of its DATA frames at least 256 bytes: HTTP/2 guards against
/// connections that send many smaller frames, and a daemon that stops
/// reading buffers them all (GOAWAY `too_many_data_frames`).
fn filler_hit() -> Hit {
    let mut hit = held_hit();
    if let Some(point) = hit.point.as_mut() {
        point.payload = Some(text(&"x".repeat(300)));
    }
    hit
}

/// Holds the probe at one point and returns the pause's key.
async fn hold(probe: &Probe, sub: &mut Subscription) -> String {
    probe.send(In::Hit(held_hit())).await;
    let event = sub
        .wait_for("the hold's pause", |e| {
            e.session_id == probe.session_id && matches!(e.payload, Some(Payload::Stopped(_)))
        })
        .await;
    let Some(Payload::Stopped(stopped)) = event.payload else {
        unreachable!()
    };
    stopped.pause.unwrap().key
}

/// Sends the duplicate hits from a task of their own (the daemon stops
/// reading a probe that does not read, so the sends wait) and waits for the
/// daemon to say it stopped reading the probe: only then is the probe's
/// queue known to be full, whatever HTTP/2 buffered on the way.
async fn fill(probe: &Probe, sub: &mut Subscription) -> tokio::task::JoinHandle<()> {
    let tx: mpsc::Sender<ConnectRequest> = probe.tx.clone();
    let sending = tokio::spawn(async move {
        for _ in 0..FILLER {
            let message = ConnectRequest {
                message: Some(In::Hit(filler_hit())),
            };
            if tx.send(message).await.is_err() {
                return;
            }
        }
    });
    let session = probe.session_id.clone();
    sub.wait_for("the notice that the probe is not read", |e| {
        e.session_id == session
            && matches!(&e.payload, Some(Payload::Notification(n)) if n.message.contains("not reading"))
    })
    .await;
    sending
}

/// The next Resume the probe reads, past whatever comes before it.
async fn next_resume(probe: &mut Probe) -> Resume {
    tokio::time::timeout(DEADLINE, async {
        loop {
            if let Out::Resume(r) = probe.rx.message().await.unwrap().unwrap().message.unwrap() {
                return r;
            }
        }
    })
    .await
    .expect("the Resume reaches the probe")
}

fn probe_breakpoint() -> BreakpointSpec {
    BreakpointSpec {
        location: Some(Location::Probe(ProbeMatch {
            point_kind: "tool_call".into(),
            name_glob: "Deploy*".into(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

async fn answer(daemon: &Daemon, key: &str) -> Result<(), tonic::Status> {
    give(daemon, key, Command::Continue(Default::default())).await
}

async fn give(daemon: &Daemon, key: &str, command: Command) -> Result<(), tonic::Status> {
    SessionServiceClient::new(daemon.channel().await)
        .send_debug_input(SendDebugInputRequest {
            input: Some(DebugInput {
                key: key.into(),
                command: Some(DebugCommand {
                    command: Some(command),
                }),
                ..Default::default()
            }),
        })
        .await
        .map(|_| ())
}

fn inject(value: &str) -> Command {
    Command::Inject(InjectCommand {
        replacement: Some(Replacement::Value(text(value))),
    })
}

async fn watched_daemon() -> (Daemon, Subscription) {
    let daemon = Daemon::start(&[]).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    (daemon, sub)
}

#[tokio::test]
async fn an_answer_waits_for_a_probe_that_stopped_reading_and_reaches_it_once_it_reads() {
    let (daemon, mut sub) = watched_daemon().await;
    let channel = daemon.small_window_channel().await;
    let (mut probe, _) = Probe::open_on(channel, hello("slow-reader"), "").await;
    let key = hold(&probe, &mut sub).await;

    let sending = fill(&probe, &mut sub).await;
    // An arming change while the probe reads nothing: it must reach it later.
    let breakpoint = dap::add_breakpoint(&daemon, probe_breakpoint()).await;

    let refused = answer(&daemon, &key)
        .await
        .expect_err("an answer to a probe that reads nothing cannot reach it");
    assert_eq!(reason(&refused), "PROBE_NOT_READING", "{refused:?}");
    assert!(
        pending_keys(&daemon, "").await.contains(&key),
        "a refused answer leaves the pause pending"
    );

    // The probe reads again: every refusal, then the arming it missed.
    let mut refusals = 0;
    let mut armed_with_breakpoint = false;
    let read_all = tokio::time::timeout(DEADLINE * 2, async {
        while refusals < FILLER || !armed_with_breakpoint {
            let message = probe.rx.message().await.unwrap().unwrap().message.unwrap();
            match message {
                Out::Refused(r) => {
                    assert_eq!(r.hit_id, "held");
                    refusals += 1;
                }
                Out::Armed(a) => {
                    armed_with_breakpoint =
                        a.matchers.iter().any(|m| m.breakpoint_id == breakpoint);
                }
                Out::Resume(r) => panic!("a Resume nobody gave arrived: {r:?}"),
                _ => {}
            }
        }
    })
    .await;
    read_all.expect("every refusal and the latest arming reach the probe once it reads");
    tokio::time::timeout(DEADLINE, sending)
        .await
        .expect("the daemon reads the probe again once it reads")
        .unwrap();

    answer(&daemon, &key)
        .await
        .expect("the pause is answerable again once the probe reads");
    let resume = next_resume(&mut probe).await;
    assert_eq!(resume.hit_id, "held");
    assert_eq!(resume.decision, ResumeDecision::Continue as i32);
    assert!(!pending_keys(&daemon, "").await.contains(&key));
}

#[tokio::test]
async fn a_probe_that_never_reads_again_ends_as_unresponsive_and_its_hold_is_reported() {
    let (daemon, mut sub) = watched_daemon().await;
    let channel = daemon.small_window_channel().await;
    let hello = Hello {
        heartbeat_interval: Some(prost_types::Duration {
            seconds: 5,
            nanos: 0,
        }),
        ..hello("stuck-reader")
    };
    let (probe, _) = Probe::open_on(channel, hello, "").await;
    let key = hold(&probe, &mut sub).await;
    let _sending = fill(&probe, &mut sub).await;

    let refused = answer(&daemon, &key)
        .await
        .expect_err("an answer to a probe that reads nothing cannot reach it");
    assert_eq!(reason(&refused), "PROBE_NOT_READING", "{refused:?}");

    let session = probe.session_id.clone();
    let resolved = sub
        .wait_for(
            "the hold given up",
            |e| matches!(&e.payload, Some(Payload::PauseResolved(r)) if r.key == key),
        )
        .await;
    let Some(Payload::PauseResolved(resolved)) = resolved.payload else {
        unreachable!()
    };
    assert_eq!(resolved.by, "probe-unresponsive");
    let ended = sub
        .wait_for("the session's end", |e| {
            e.session_id == session && matches!(e.payload, Some(Payload::SessionEnded(_)))
        })
        .await;
    let Some(Payload::SessionEnded(ended)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(ended.reason, EndReason::ProbeUnresponsive as i32);
    assert!(ended.detail.contains("read nothing"), "{}", ended.detail);
    assert!(pending_keys(&daemon, "").await.is_empty());
    // The probe is still connected and reading nothing: a second answer
    // finds no pause, never a Resume nobody will read.
    let again = answer(&daemon, &key).await.expect_err("the pause is gone");
    assert_eq!(reason(&again), "PAUSE_NOT_FOUND");
    drop(probe);
}

#[tokio::test]
async fn every_kind_of_answer_is_refused_alike_while_the_probe_reads_nothing() {
    let (daemon, mut sub) = watched_daemon().await;
    let channel = daemon.small_window_channel().await;
    let (mut probe, _) = Probe::open_on(channel, hello("slow-reader"), "").await;
    let key = hold(&probe, &mut sub).await;
    let sending = fill(&probe, &mut sub).await;

    let refusals = [
        ("INJECT", inject("pwd")),
        ("EVAL", Command::Eval(EvalCommand { code: "1".into() })),
        ("SKIP", Command::Skip(Default::default())),
    ];
    for (what, command) in refusals {
        let refused = give(&daemon, &key, command)
            .await
            .expect_err("an answer to a probe that reads nothing cannot reach it");
        assert_eq!(reason(&refused), "PROBE_NOT_READING", "{what}: {refused:?}");
        assert!(
            pending_keys(&daemon, "").await.contains(&key),
            "a refused {what} leaves the pause pending"
        );
    }
    let refused = dap::sessions(&daemon)
        .await
        .r#continue(ContinueRequest {
            session_id: probe.session_id.clone(),
            ..Default::default()
        })
        .await
        .expect_err("the session's Continue cannot reach the probe either");
    assert_eq!(reason(&refused), "PROBE_NOT_READING", "{refused:?}");
    assert!(pending_keys(&daemon, "").await.contains(&key));

    // Once it reads again the probe finds its refusals and nothing a
    // refused answer might have left behind.
    let mut refusals = 0;
    tokio::time::timeout(DEADLINE * 2, async {
        while refusals < FILLER {
            match probe.rx.message().await.unwrap().unwrap().message.unwrap() {
                Out::Refused(_) => refusals += 1,
                Out::Resume(r) => panic!("a Resume from a refused answer arrived: {r:?}"),
                Out::Eval(e) => panic!("an Eval from a refused answer arrived: {e:?}"),
                _ => {}
            }
        }
    })
    .await
    .expect("every refusal reaches the probe once it reads");
    tokio::time::timeout(DEADLINE, sending)
        .await
        .expect("the daemon reads the probe again once it reads")
        .unwrap();

    give(&daemon, &key, inject("pwd"))
        .await
        .expect("the INJECT is taken once the probe reads");
    let resume = next_resume(&mut probe).await;
    assert_eq!(resume.decision, ResumeDecision::Replace as i32);
    assert_eq!(resume.value, Some(text("pwd")));

    // The refused INJECT was not reported as a value the program rejected:
    // the first word about this pause after the refusals is its resolution.
    let event = sub
        .wait_for("the pause's next event", |e| match &e.payload {
            Some(Payload::EvalError(err)) => err.key == key,
            Some(Payload::Stopped(s)) => s.pause.as_ref().is_some_and(|p| p.key == key),
            Some(Payload::PauseResolved(r)) => r.key == key,
            _ => false,
        })
        .await;
    assert!(
        matches!(event.payload, Some(Payload::PauseResolved(_))),
        "a refused INJECT is not an eval error or a new prompt: {event:?}"
    );
}
