//! The locals a pause carries while a program is stepped into calls and back
//! out, under every adapter: each stop shows its own frame's locals, and what
//! stepd asks the adapter to build them leaves nothing in the output.

use std::path::PathBuf;

use stepd_e2e::{dap, fixture, line_of, source_spec, watched};
use stepd_proto::v1::{
    EndReason, LaunchRequest, Pause, RemoveBreakpointRequest, StepKind,
    breakpoint_service_client::BreakpointServiceClient, event::Payload,
};

/// One adapter and the loop fixture it debugs (`step(i, total)` called for
/// i = 0..5, `total` growing by 2i).
struct Case {
    adapter: &'static str,
    command: Vec<String>,
    program: PathBuf,
    source: PathBuf,
}

fn cases() -> Vec<Case> {
    let c = fixture("c/hello.c");
    let built = |name: &str| {
        let path = fixture(name);
        assert!(
            path.is_file(),
            "{} is missing; run scripts/build-fixtures",
            path.display()
        );
        path
    };
    vec![
        Case {
            adapter: "debugpy",
            command: Vec::new(),
            program: fixture("python/loop.py"),
            source: fixture("python/loop.py"),
        },
        Case {
            adapter: "lldb",
            command: vec!["lldb-dap-19".into()],
            program: built("build/hello"),
            source: c.clone(),
        },
        Case {
            adapter: "lldb",
            command: vec!["lldb-vscode-14".into()],
            program: built("build/hello"),
            source: c,
        },
        Case {
            adapter: "dlv",
            command: Vec::new(),
            program: built("build/go-hello"),
            source: fixture("go/hello/main.go"),
        },
    ]
}

fn local(pause: &Pause, name: &str) -> i64 {
    let text = dap::local(pause, name);
    text.parse()
        .unwrap_or_else(|_| panic!("{name} = {text:?} is not a number"))
}

#[tokio::test]
async fn stepping_into_and_out_of_calls_shows_each_frames_locals() {
    for case in cases() {
        let name = case.command.first().map_or(case.adapter, String::as_str);
        let (daemon, mut sub) = watched().await;
        let call = line_of(&case.source, "call");
        let bp =
            dap::add_breakpoint(&daemon, source_spec(case.source.to_str().unwrap(), call)).await;
        let session = dap::launch_with(
            &daemon,
            LaunchRequest {
                adapter: case.adapter.into(),
                adapter_command: case.command.clone(),
                program: case.program.to_str().unwrap().into(),
                ..Default::default()
            },
        )
        .await
        .session
        .unwrap();
        let mut pause = dap::next_pause(&mut sub, &session.id).await;
        let mut sessions = dap::sessions(&daemon).await;
        // Three rounds of: in to step(), over its lines and back out to main,
        // then continue to the breakpoint of the next call.
        for round in 0..3 {
            assert_eq!(local(&pause, "i"), round, "{name}: at the call");
            assert_eq!(local(&pause, "total"), round * (round - 1), "{name}");
            let mut kinds = vec![StepKind::In];
            kinds.extend([StepKind::Over; 4]);
            for kind in kinds {
                let state = dap::step(&mut sessions, &session.id, kind).await;
                let Some(stop) = state.pause else {
                    panic!("{name}: no pause after {kind:?}: {state:?}")
                };
                let at = stop.location.clone().unwrap();
                // Both frames have `i`: in step() it is the argument.
                assert_eq!(
                    local(&stop, "i"),
                    round,
                    "{name} at {}:{}",
                    at.function,
                    at.line
                );
                if at.line == line_of(&case.source, "after_call") {
                    assert_eq!(local(&stop, "total"), round * (round + 1), "{name}");
                }
            }
            let next = dap::resume(&mut sessions, &session.id).await;
            pause = next
                .pause
                .unwrap_or_else(|| panic!("{name}: no stop at the next call"));
        }
        // The rest of the run; only the program speaks in its output.
        BreakpointServiceClient::new(daemon.channel().await)
            .remove_breakpoint(RemoveBreakpointRequest { id: bp })
            .await
            .unwrap();
        dap::resume(&mut sessions, &session.id).await;
        let ended = sub
            .wait_for("the end", |e| {
                e.session_id == session.id && matches!(e.payload, Some(Payload::SessionEnded(_)))
            })
            .await;
        let Some(Payload::SessionEnded(ended)) = ended.payload else {
            unreachable!()
        };
        assert_eq!(ended.reason, EndReason::Exited as i32, "{name}");
        let text = dap::output_text(&daemon, &session.id).await;
        // A request for an earlier stop's handles must not make the adapter
        // complain (debugpy's adapter writes such failures to its stderr).
        for line in text.lines() {
            let lower = line.to_lowercase();
            assert!(
                !lower.contains("error")
                    && !lower.contains("couldn't")
                    && !lower.contains("unable"),
                "{name} said {line:?} in:\n{text}"
            );
        }
        assert!(text.contains("i=4 total=20"), "{name}: {text}");
        daemon.stop().await;
    }
}
