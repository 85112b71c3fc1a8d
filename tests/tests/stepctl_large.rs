//! stepctl on answers larger than tonic's default 4 MiB limit and with cells
//! longer than a format width may be.

use std::process::{Output, Stdio};

use stepd_e2e::{Daemon, stepctl_bin};
use stepd_proto::v1::{
    AddBreakpointRequest, BreakpointSpec, FunctionLocation,
    breakpoint_service_client::BreakpointServiceClient, breakpoint_spec::Location,
};

/// Function names this long: past 65,535, where a format width panics.
const NAME: usize = 70_000;
/// Breakpoints this many: about 4.9 MB in one answer, past tonic's 4 MiB.
const COUNT: usize = 70;

fn stepctl(addr: &str, args: &[&str]) -> Output {
    let out = std::process::Command::new(stepctl_bin())
        .args(args)
        .env("STEPD_ADDR", addr)
        .env_remove("STEPD_MAX_MESSAGE_BYTES")
        .stdin(Stdio::null())
        .output()
        .expect("run stepctl");
    assert!(
        out.status.success(),
        "stepctl {args:?}: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[tokio::test]
async fn break_list_and_watch_read_answers_above_4_mib() {
    let daemon = Daemon::start(&[]).await;
    let mut client = BreakpointServiceClient::new(daemon.channel().await);
    for i in 0..COUNT {
        let name = format!("{i:03}{}", "f".repeat(NAME - 3));
        client
            .add_breakpoint(AddBreakpointRequest {
                spec: Some(BreakpointSpec {
                    location: Some(Location::Function(FunctionLocation { name })),
                    ..Default::default()
                }),
            })
            .await
            .unwrap();
    }

    let table = String::from_utf8(stepctl(&daemon.addr, &["break", "list"]).stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), COUNT + 1, "a header and a row each");
    for line in &lines[1..] {
        assert!(line.contains("…"), "long cells are cut: {}", &line[..80]);
        assert!(line.chars().count() < 1_000, "{} characters", line.len());
    }

    let json = stepctl(&daemon.addr, &["--json", "break", "list"]).stdout;
    let listed: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let breakpoints = listed["breakpoints"].as_array().unwrap();
    assert_eq!(breakpoints.len(), COUNT);
    let name = breakpoints[0]["spec"]["function"]["name"].as_str().unwrap();
    assert_eq!(name.len(), NAME, "--json prints fields whole");

    // The snapshot that starts a watch holds every breakpoint.
    let watched = stepctl(&daemon.addr, &["--json", "watch", "--count", "1"]).stdout;
    let first: serde_json::Value =
        serde_json::from_slice(watched.split(|&b| b == b'\n').next().unwrap()).unwrap();
    assert!(
        first["snapshot"].is_object(),
        "{}",
        &String::from_utf8_lossy(&watched)[..200]
    );
    assert!(watched.len() > 4 * 1024 * 1024);
    daemon.stop().await;
}
