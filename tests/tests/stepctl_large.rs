//! stepctl on listings larger than tonic's default 4 MiB limit (which the
//! daemon now sends in pages and parts) and with cells longer than a format
//! width may be (from a breakpoint stored before the size limits).

use std::process::{Output, Stdio};

use stepd_e2e::{Daemon, stepctl_bin};
use stepd_proto::v1::{
    AddBreakpointRequest, BreakpointSpec, FunctionLocation,
    breakpoint_service_client::BreakpointServiceClient, breakpoint_spec::Location,
};

/// A stored function name this long: past 65,535, where a format width panics.
const LONG_NAME: usize = 70_000;
/// Function names this long: within the 4 KiB limit.
const NAME: usize = 4_000;
/// Breakpoints this many: about 5.3 MB together, past tonic's 4 MiB.
const COUNT: usize = 1_300;

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
    // A breakpoint stored before the size limits, written into the database.
    let dir = stepd_e2e::TempDir::new("large");
    Daemon::start_in(dir.path(), &[]).await.stop().await;
    let spec = BreakpointSpec {
        location: Some(Location::Function(FunctionLocation {
            name: "L".repeat(LONG_NAME),
        })),
        ..Default::default()
    };
    let blob = dir.path().join("row.bin");
    std::fs::write(&blob, prost::Message::encode_to_vec(&spec)).unwrap();
    let stored = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys\n\
             db = sqlite3.connect(sys.argv[1])\n\
             db.execute('INSERT INTO breakpoints (spec, created_at_us, updated_at_us) \
             VALUES (?, 1, 1)', (open(sys.argv[2], 'rb').read(),))\n\
             db.commit()\n",
        )
        .arg(dir.path().join("stepd.db"))
        .arg(&blob)
        .status()
        .expect("python3 runs");
    assert!(stored.success());
    let daemon = Daemon::start_in(dir.path(), &[]).await;
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
    assert_eq!(lines.len(), COUNT + 2, "a header and a row each");
    for line in &lines[1..] {
        assert!(line.contains("…"), "long cells are cut: {}", &line[..80]);
        assert!(line.chars().count() < 1_000, "{} characters", line.len());
    }

    let json = stepctl(&daemon.addr, &["--json", "break", "list"]).stdout;
    let listed: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let breakpoints = listed["breakpoints"].as_array().unwrap();
    assert_eq!(breakpoints.len(), COUNT + 1, "every page");
    let name = breakpoints[0]["spec"]["function"]["name"].as_str().unwrap();
    assert_eq!(name.len(), LONG_NAME, "--json prints fields whole");

    // The snapshot that starts a watch holds every breakpoint, in parts.
    let watched = stepctl(&daemon.addr, &["--json", "watch", "--count", "3"]).stdout;
    let parts: Vec<serde_json::Value> = watched
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(
        parts.len(),
        3,
        "{}",
        &String::from_utf8_lossy(&watched)[..200]
    );
    let held: usize = parts
        .iter()
        .map(|p| p["snapshot"]["breakpoints"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(held, COUNT + 1);
    assert_eq!(parts[0]["snapshot"]["more"], true);
    assert!(parts[2]["snapshot"].get("more").is_none(), "the last part");
    daemon.stop().await;
}
