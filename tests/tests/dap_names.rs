//! Frames name functions as their language's users write them: Rust's
//! without the symbol hash and escapes (lldb), Go's as Go source does with
//! the package path in `module` (dlv).

use stepd_e2e::{dap, fixture, line_of, source_spec, watched};
use stepd_proto::v1::{GetStackTraceRequest, LaunchRequest};

#[tokio::test]
async fn rust_frames_under_lldb_have_no_hashes_or_escapes() {
    let (daemon, mut sub) = watched().await;
    let source = fixture("rust/counter.rs");
    let binary = fixture("build/rust-counter");
    assert!(binary.is_file(), "run scripts/build-fixtures");
    dap::add_breakpoint(
        &daemon,
        source_spec(source.to_str().unwrap(), line_of(&source, "bump")),
    )
    .await;
    let session = dap::launch_with(
        &daemon,
        LaunchRequest {
            adapter: "lldb".into(),
            program: binary.to_str().unwrap().into(),
            ..Default::default()
        },
    )
    .await
    .session
    .unwrap();
    let pause = dap::next_pause(&mut sub, &session.id).await;
    // lldb says counter::Counter::bump::h1a400d954bcab7ba.
    assert_eq!(pause.location.unwrap().function, "counter::Counter::bump");
    let frames = dap::sessions(&daemon)
        .await
        .get_stack_trace(GetStackTraceRequest {
            session_id: session.id.clone(),
            thread_id: pause.thread_id,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .frames;
    let names: Vec<&str> = frames.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names[0], "counter::Counter::bump", "{names:?}");
    assert_eq!(names[1], "counter::main::{{closure}}", "{names:?}");
    let hashed = |n: &str| {
        n.rsplit("::")
            .next()
            .is_some_and(|last| last.len() == 17 && last.starts_with('h'))
    };
    assert!(
        names.iter().all(|n| !n.contains('$') && !hashed(n)),
        "{names:?}"
    );
    daemon.stop().await;
}

#[tokio::test]
async fn go_frames_under_dlv_read_as_go_source() {
    let (daemon, mut sub) = watched().await;
    let source = fixture("go/hello/main.go");
    dap::add_breakpoint(
        &daemon,
        source_spec(source.to_str().unwrap(), line_of(&source, "step")),
    )
    .await;
    let session = dap::launch_with(
        &daemon,
        LaunchRequest {
            adapter: "dlv".into(),
            program: fixture("build/go-hello").to_str().unwrap().into(),
            ..Default::default()
        },
    )
    .await
    .session
    .unwrap();
    let pause = dap::next_pause(&mut sub, &session.id).await;
    let location = pause.location.unwrap();
    // dlv says main.step.
    assert_eq!(
        (location.function.as_str(), location.module.as_str()),
        ("step", "main")
    );
    daemon.stop().await;
}
