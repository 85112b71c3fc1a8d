//! The held-probe programs (`tests/fixtures/python/held_probe.py` and
//! `tests/fixtures/go/heldprobe`): each holds once at tool_call "Bash" with
//! `{"cmd": "ls", "lang": ...}` and prints `result <json>` after the hold.

use stepd_proto::v1::{
    BreakpointSpec, InjectCommand, Pause, breakpoint_spec::Location, debug_command::Command,
    event::Payload, inject_command::Replacement,
};

use crate::{Daemon, Program, Subscription, dap, fixture};

/// A probe breakpoint at tool_call "Bash".
pub fn bash_breakpoint() -> BreakpointSpec {
    BreakpointSpec {
        location: Some(Location::Probe(stepd_proto::v1::ProbeMatch {
            point_kind: "tool_call".into(),
            name_glob: "Bash".into(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// The Python and the Go held-probe programs, connected to `addr` with `flags`.
pub fn programs(addr: &str, flags: &[&str]) -> (Program, Program) {
    let mut python = Program::python(&fixture("python/held_probe.py"), flags);
    python.env("STEPD_ADDR", addr);
    let go = fixture("build/go-heldprobe");
    assert!(
        go.is_file(),
        "{} is missing: run scripts/build-fixtures",
        go.display()
    );
    let mut go = tokio::process::Command::new(go);
    go.args(flags).env("STEPD_ADDR", addr);
    (Program::spawn(python), Program::spawn(go))
}

/// Waits until both programs are connected and their pauses open; returns
/// the pauses, the Python one first.
pub async fn both_held(
    sub: &mut Subscription,
    python: &mut Program,
    go: &mut Program,
) -> [Pause; 2] {
    assert!(python.line().await.starts_with("session "));
    assert!(go.line().await.starts_with("session "));
    held(sub).await
}

/// The two programs' pauses, as `stopped` events (or a snapshot) tell them,
/// told apart by the language in their payload: Python first.
pub async fn held(sub: &mut Subscription) -> [Pause; 2] {
    let mut found: [Option<Pause>; 2] = [None, None];
    while found.iter().any(Option::is_none) {
        let event = sub.wait_for("a probe's pause", |_| true).await;
        let pauses = match event.payload {
            Some(Payload::Stopped(s)) => s.pause.into_iter().collect(),
            Some(Payload::Snapshot(s)) => s.pauses,
            _ => Vec::new(),
        };
        for pause in pauses {
            match payload(&pause)["lang"].as_str() {
                Some("python") => found[0] = Some(pause),
                Some("go") => found[1] = Some(pause),
                _ => {}
            }
        }
    }
    found.map(Option::unwrap)
}

/// The pause's payload as JSON text.
pub fn payload(pause: &Pause) -> serde_json::Value {
    let value = pause
        .point
        .as_ref()
        .and_then(|p| p.payload.clone())
        .expect("a payload");
    json_of(&value)
}

fn json_of(value: &prost_types::Value) -> serde_json::Value {
    use prost_types::value::Kind;
    match value.kind.as_ref() {
        Some(Kind::StringValue(s)) => serde_json::Value::String(s.clone()),
        Some(Kind::NumberValue(n)) => serde_json::json!(n),
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(*b),
        Some(Kind::StructValue(s)) => serde_json::Value::Object(
            s.fields
                .iter()
                .map(|(k, v)| (k.clone(), json_of(v)))
                .collect(),
        ),
        Some(Kind::ListValue(l)) => {
            serde_json::Value::Array(l.values.iter().map(json_of).collect())
        }
        _ => serde_json::Value::Null,
    }
}

fn text(s: &str) -> prost_types::Value {
    prost_types::Value {
        kind: Some(prost_types::value::Kind::StringValue(s.into())),
    }
}

/// Answers `pause` with INJECT `{"cmd": "injected", "lang": lang}`; the
/// program then prints that value.
pub async fn inject(daemon: &Daemon, pause: &Pause, lang: &str) {
    let injected = prost_types::Value {
        kind: Some(prost_types::value::Kind::StructValue(prost_types::Struct {
            fields: [
                ("cmd".to_owned(), text("injected")),
                ("lang".to_owned(), text(lang)),
            ]
            .into(),
        })),
    };
    dap::answer(
        daemon,
        &pause.key,
        Command::Inject(InjectCommand {
            replacement: Some(Replacement::Value(injected)),
        }),
    )
    .await
    .expect("inject");
}
