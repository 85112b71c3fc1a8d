//! Size limits on the real binary: every client-supplied string has a bound
//! and is refused past it with LIMIT_EXCEEDED; listings and snapshots that
//! would not fit one message come in pages and parts; breakpoints stored
//! before the limits existed do not break the start or the stream; and
//! clients that do not read cannot make the daemon hold more than a bounded
//! number of bytes for them.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use prost::Message as _;
use prost_types::{Value, value::Kind};
use stepd_e2e::{
    DEADLINE, Daemon, Subscription, TempDir, reason, rss, source_spec, violated_fields,
};
use stepd_proto::v1::{
    AddBreakpointRequest, Breakpoint, BreakpointSpec, ConnectRequest, FunctionLocation, Hello,
    LaunchRequest, ListBreakpointsRequest, ListSessionsRequest, ObservedReport, PingRequest,
    Reports, Snapshot, Watch, breakpoint_service_client::BreakpointServiceClient,
    breakpoint_spec::Location, connect_request::Message as In,
    daemon_service_client::DaemonServiceClient, event::Payload,
    probe_service_client::ProbeServiceClient, session_service_client::SessionServiceClient,
    subscribe_request::Message,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, transport::Channel};
use tonic_types::StatusExt;

/// Asserts a LIMIT_EXCEEDED refusal naming `limit`, its `max` and `field`.
fn assert_limit(status: &Status, limit: &str, max: usize, field: &str) {
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(reason(status), "LIMIT_EXCEEDED", "{status:?}");
    let info = status.get_details_error_info().expect("ErrorInfo");
    assert_eq!(info.metadata["limit"], limit, "{status:?}");
    assert_eq!(info.metadata["max"], max.to_string(), "{status:?}");
    assert_eq!(info.metadata["field"], field, "{status:?}");
    assert!(
        violated_fields(status).contains(&field.to_owned()),
        "{status:?}"
    );
}

fn function_spec(name: String) -> BreakpointSpec {
    BreakpointSpec {
        location: Some(Location::Function(FunctionLocation { name })),
        ..Default::default()
    }
}

/// Every breakpoint, following pages; also the size of each page.
async fn all_pages(channel: Channel, page_size: u32) -> (Vec<Breakpoint>, Vec<usize>) {
    let mut client = BreakpointServiceClient::new(channel).max_decoding_message_size(64 << 20);
    let mut request = ListBreakpointsRequest {
        page_size,
        ..Default::default()
    };
    let (mut all, mut pages) = (Vec::new(), Vec::new());
    loop {
        let page = client
            .list_breakpoints(request.clone())
            .await
            .expect("a page")
            .into_inner();
        pages.push(page.breakpoints.len());
        all.extend(page.breakpoints);
        if page.next_page_token.is_empty() {
            return (all, pages);
        }
        assert!(pages.len() < 10_000, "pages never end");
        request.page_token = page.next_page_token;
    }
}

/// Reads a whole snapshot (all its parts) as the next thing on the stream;
/// also the number of parts.
async fn whole_snapshot(sub: &mut Subscription) -> (Snapshot, usize) {
    let mut whole: Option<Snapshot> = None;
    let mut parts = 0;
    loop {
        let event = sub.next().await;
        let Some(Payload::Snapshot(part)) = event.payload else {
            panic!("expected a snapshot part, got {event:?}");
        };
        assert_eq!(part.part as usize, parts, "parts come in order");
        parts += 1;
        let more = part.more;
        match &mut whole {
            None => whole = Some(part),
            Some(w) => {
                assert_eq!(w.seq, part.seq, "parts share their seq");
                w.sessions.extend(part.sessions);
                w.pauses.extend(part.pauses);
                w.breakpoints.extend(part.breakpoints);
                w.breakpoint_statuses.extend(part.breakpoint_statuses);
            }
        }
        if !more {
            return (whole.unwrap(), parts);
        }
    }
}

/// A subscription whose client accepts messages as large as the daemon's.
async fn open(channel: Channel, watch: Watch) -> Subscription {
    let (tx, rx) = mpsc::channel(128);
    tx.send(stepd_proto::v1::SubscribeRequest {
        message: Some(Message::Watch(watch)),
    })
    .await
    .unwrap();
    let rx = stepd_proto::v1::event_service_client::EventServiceClient::new(channel)
        .max_decoding_message_size(64 << 20)
        .subscribe(ReceiverStream::new(rx))
        .await
        .expect("subscribe")
        .into_inner();
    Subscription { tx, rx }
}

/// Writes breakpoint rows straight into a stopped daemon's database, as a
/// daemon from before the size limits could have stored them.
fn store_rows(data_dir: &Path, specs: &[BreakpointSpec]) {
    for (i, spec) in specs.iter().enumerate() {
        let blob = data_dir.join(format!("row-{i}.bin"));
        std::fs::write(&blob, spec.encode_to_vec()).unwrap();
        let status = std::process::Command::new("python3")
            .arg("-c")
            .arg(
                "import sqlite3, sys\n\
                 db = sqlite3.connect(sys.argv[1])\n\
                 db.execute('INSERT INTO breakpoints (spec, created_at_us, updated_at_us) \
                 VALUES (?, 1, 1)', (open(sys.argv[2], 'rb').read(),))\n\
                 db.commit()\n",
            )
            .arg(data_dir.join("stepd.db"))
            .arg(&blob)
            .status()
            .expect("python3 runs");
        assert!(status.success(), "storing row {i}");
        std::fs::remove_file(blob).unwrap();
    }
}

/// A daemon on a fresh data directory holding `specs` as stored rows.
async fn daemon_with_rows(dir: &TempDir, specs: &[BreakpointSpec], args: &[&str]) -> Daemon {
    // The first start creates the database and its tables.
    Daemon::start_in(dir.path(), args).await.stop().await;
    store_rows(dir.path(), specs);
    Daemon::start_in(dir.path(), args).await
}

#[tokio::test]
async fn oversized_fields_are_refused_with_the_limit_named_and_nothing_is_kept() {
    let daemon = Daemon::start(&[]).await;
    let channel = daemon.channel().await;
    let mut breakpoints = BreakpointServiceClient::new(channel.clone());

    let err = breakpoints
        .add_breakpoint(AddBreakpointRequest {
            spec: Some(function_spec("f".repeat(9_000_000))),
        })
        .await
        .unwrap_err();
    assert_limit(&err, "name_bytes", 4096, "spec.function.name");
    assert!(err.message().len() <= 1024, "{}", err.message().len());

    let mut spec = source_spec(&"p".repeat(5000), 1);
    spec.condition = "x".repeat(70_000);
    let err = breakpoints
        .add_breakpoint(AddBreakpointRequest { spec: Some(spec) })
        .await
        .unwrap_err();
    assert_limit(&err, "path_bytes", 4096, "spec.source.path");
    assert_eq!(
        violated_fields(&err),
        ["spec.source.path", "spec.condition"],
        "every field over its limit is named"
    );
    let (listed, _) = all_pages(channel.clone(), 0).await;
    assert!(listed.is_empty(), "nothing was stored: {listed:?}");

    let mut sessions = SessionServiceClient::new(channel.clone());
    let err = sessions
        .launch(LaunchRequest {
            program: "/bin/true".into(),
            args: vec!["a".repeat(600_000), "b".repeat(600_000)],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_limit(&err, "args_bytes", 1 << 20, "args");
    let err = sessions
        .list_sessions(ListSessionsRequest {
            label_selector: "a,".repeat(5000),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_limit(&err, "selector_bytes", 4096, "label_selector");

    // A probe's Hello: refused before any session exists.
    let (tx, rx) = mpsc::channel(1);
    tx.send(ConnectRequest {
        message: Some(In::Hello(Hello {
            name: "n".repeat(9_000_000),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let err = ProbeServiceClient::new(channel.clone())
        .connect(ReceiverStream::new(rx))
        .await
        .unwrap_err();
    assert_limit(&err, "name_bytes", 4096, "hello.name");
    let listed = sessions
        .list_sessions(ListSessionsRequest {
            include_ended: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(listed.sessions.is_empty(), "no session: {listed:?}");

    // A Watch over its limits is answered with an error event, and the
    // stream goes on.
    let mut sub = Subscription::open(channel.clone(), Watch::default()).await;
    let (_, _) = whole_snapshot(&mut sub).await;
    sub.send(Message::Watch(Watch {
        session_ids: (0..2000).map(|i| format!("s-{i}")).collect(),
        ..Default::default()
    }))
    .await;
    let error = sub
        .wait_for("the Watch's refusal", |e| {
            matches!(e.payload, Some(Payload::Error(_)))
        })
        .await;
    let Some(Payload::Error(error)) = error.payload else {
        unreachable!()
    };
    assert_eq!(error.metadata["limit"], "watch_session_count");
    assert_eq!(error.metadata["max"], "1024");
    breakpoints
        .add_breakpoint(AddBreakpointRequest {
            spec: Some(source_spec("/a.py", 1)),
        })
        .await
        .unwrap();
    sub.wait_for("the next event", |e| {
        matches!(e.payload, Some(Payload::BreakpointUpdated(_)))
    })
    .await;
    daemon.stop().await;
}

/// Two breakpoints stored before the limits, 1.5 MB each, with a daemon whose
/// messages are at most 2 MiB: the listing and the snapshot, 3 MB together,
/// come in pages and parts of one each, and the stream goes on.
#[tokio::test]
async fn stored_oversized_breakpoints_do_not_break_the_start_or_the_stream() {
    let dir = TempDir::new("legacy");
    let big = 1_500_000;
    let rows = [
        function_spec("a".repeat(big)),
        function_spec("b".repeat(big)),
    ];
    let args = ["--max-message-bytes", "2097152"];
    let daemon = daemon_with_rows(&dir, &rows, &args).await;
    let channel = daemon.channel().await;

    let (listed, pages) = all_pages(channel.clone(), 0).await;
    assert_eq!(pages, [1, 1], "one breakpoint a page");
    let names: Vec<usize> = listed
        .iter()
        .map(
            |bp| match bp.spec.as_ref().and_then(|s| s.location.clone()) {
                Some(Location::Function(f)) => f.name.len(),
                other => panic!("unexpected {other:?}"),
            },
        )
        .collect();
    assert_eq!(names, [big, big], "stored as they were");

    let mut sub = open(channel.clone(), Watch::default()).await;
    let (snapshot, parts) = whole_snapshot(&mut sub).await;
    assert_eq!(parts, 2);
    assert_eq!(snapshot.breakpoints.len(), 2);

    // The stream is alive: a change arrives as an event.
    let added = BreakpointServiceClient::new(channel.clone())
        .add_breakpoint(AddBreakpointRequest {
            spec: Some(source_spec("/a.py", 3)),
        })
        .await
        .unwrap()
        .into_inner()
        .breakpoint
        .unwrap();
    let event = sub.next().await;
    let Some(Payload::BreakpointUpdated(update)) = event.payload else {
        panic!("expected the breakpoint event, got {event:?}");
    };
    assert_eq!(update.breakpoint.unwrap().id, added.id);
    daemon.stop().await;
}

/// Forty breakpoints at their size limits make about 320 KB, beyond a
/// 256 KiB message: ListBreakpoints pages (by bytes, and by page_size when
/// asked) and the snapshot is complete across its parts.
#[tokio::test]
async fn many_breakpoints_beyond_one_message_are_paged_and_snapshots_complete() {
    let daemon = Daemon::start(&["--max-message-bytes", "262144"]).await;
    let channel = daemon.channel().await;
    let mut client = BreakpointServiceClient::new(channel.clone());
    let mut ids = Vec::new();
    for i in 0..40 {
        let mut spec = source_spec(&format!("/{i}/{}", "p".repeat(4000)), 1);
        spec.condition = "c".repeat(4096);
        let added = client
            .add_breakpoint(AddBreakpointRequest { spec: Some(spec) })
            .await
            .unwrap()
            .into_inner();
        ids.push(added.breakpoint.unwrap().id);
    }
    let (listed, pages) = all_pages(channel.clone(), 0).await;
    assert_eq!(
        listed.iter().map(|b| &b.id).collect::<Vec<_>>(),
        ids.iter().collect::<Vec<_>>()
    );
    assert!(pages.len() >= 3, "pages of at most 128 KiB: {pages:?}");
    let (listed, pages) = all_pages(channel.clone(), 7).await;
    assert_eq!(listed.len(), 40);
    assert!(pages.iter().all(|n| *n <= 7), "{pages:?}");

    let mut sub = open(channel.clone(), Watch::default()).await;
    let (snapshot, parts) = whole_snapshot(&mut sub).await;
    assert!(parts >= 3, "{parts}");
    assert_eq!(
        snapshot
            .breakpoints
            .iter()
            .map(|b| &b.id)
            .collect::<Vec<_>>(),
        ids.iter().collect::<Vec<_>>()
    );
    daemon.stop().await;
}

/// Adds a breakpoint to look for on the streams.
async fn add_marker(channel: &Channel) -> String {
    BreakpointServiceClient::new(channel.clone())
        .add_breakpoint(AddBreakpointRequest {
            spec: Some(source_spec("/marker.py", 1)),
        })
        .await
        .unwrap()
        .into_inner()
        .breakpoint
        .unwrap()
        .id
}

/// Reads until breakpoint `id` is known: its event, or a whole snapshot that
/// holds it. Returns how many snapshots and gaps came on the way.
async fn read_until(sub: &mut Subscription, id: &str) -> (usize, usize) {
    let (mut snapshots, mut gaps, mut in_snapshot) = (0, 0, false);
    let deadline = Instant::now() + DEADLINE;
    loop {
        assert!(Instant::now() < deadline, "{id} never came");
        let event = sub.next().await;
        match &event.payload {
            Some(Payload::Snapshot(s)) => {
                if s.part == 0 {
                    snapshots += 1;
                    in_snapshot = false;
                }
                in_snapshot |= s.breakpoints.iter().any(|b| b.id == id);
                if in_snapshot && !s.more {
                    return (snapshots, gaps);
                }
            }
            Some(Payload::Gap(_)) => gaps += 1,
            Some(Payload::BreakpointUpdated(u))
                if u.breakpoint.as_ref().is_some_and(|b| b.id == id) =>
            {
                return (snapshots, gaps);
            }
            _ => {}
        }
    }
}

/// CPU ticks (user + system) of a process.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Whether any thread of the process is running or waiting for a CPU.
fn runnable(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('R'))
        })
    })
}

/// Waits until the process has used no CPU for half a second with none of
/// its threads runnable (a busy machine may keep one waiting for a CPU that
/// long): it has done all the work it was given.
async fn settled(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut last, mut quiet_since) = (cpu_ticks(pid), Instant::now());
    while quiet_since.elapsed() < Duration::from_millis(500) {
        assert!(Instant::now() < deadline, "the daemon never settled");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = cpu_ticks(pid);
        if now != last || runnable(pid) {
            (last, quiet_since) = (now, Instant::now());
        }
    }
}

fn big_value(bytes: usize) -> Value {
    Value {
        kind: Some(Kind::StringValue("v".repeat(bytes))),
    }
}

/// Three streams that never read send 100 Watches each over an 8 MB state,
/// and a fourth stops reading while 32 MB of events are published. Before
/// byte bounds, each Watch pinned a copy of the snapshot (65 a stream,
/// 1.5 GB here); now a stream holds at most one snapshot and 16 MiB of
/// events, and the fourth is ended at that bound. The bound: 300 MB over
/// the daemon's resting size leaves five times what the daemon needs here
/// (3 snapshots of 8 MB, one subscriber's 16 MiB, the rings' 2 × 8 MiB,
/// transport buffers) and is far below the gigabytes it took before.
#[tokio::test]
async fn clients_that_do_not_read_cannot_pin_unbounded_memory() {
    let dir = TempDir::new("memory");
    let rows = [
        function_spec("a".repeat(4_000_000)),
        function_spec("b".repeat(4_000_000)),
    ];
    let daemon = daemon_with_rows(&dir, &rows, &[]).await;
    let pid = daemon.child.id().unwrap();
    let channel = daemon.channel().await;
    settled(pid).await;
    let resting = rss(pid);

    // The fourth stream reads its snapshot, then stops reading.
    let mut slow = open(daemon.channel().await, Watch::default()).await;
    let (snapshot, _) = whole_snapshot(&mut slow).await;
    assert_eq!(snapshot.breakpoints.len(), 2);

    let mut streams = Vec::new();
    for _ in 0..3 {
        let sub = open(daemon.channel().await, Watch::default()).await;
        for _ in 0..99 {
            sub.send(Message::Watch(Watch::default())).await;
        }
        streams.push(sub);
    }

    // Large events: a probe reports 32 values of about 1 MiB.
    let (tx, rx) = mpsc::channel(64);
    tx.send(ConnectRequest {
        message: Some(In::Hello(Hello {
            name: "big".into(),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let mut probe = ProbeServiceClient::new(channel.clone())
        .connect(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    probe.message().await.unwrap().expect("welcome");
    for _ in 0..32 {
        tx.send(ConnectRequest {
            message: Some(In::Reports(Reports {
                observed: vec![ObservedReport {
                    kind: "k".into(),
                    name: "n".into(),
                    // Just within the 1 MiB `value_bytes` of a report.
                    value: Some(big_value((1 << 20) - 16)),
                    ..Default::default()
                }],
                ..Default::default()
            })),
        })
        .await
        .unwrap();
    }

    settled(pid).await;
    let loaded = rss(pid);
    eprintln!(
        "resting {} MB, with the streams {} MB",
        resting >> 20,
        loaded >> 20
    );
    assert!(
        loaded < resting + (300 << 20),
        "RSS grew from {} MB to {} MB",
        resting >> 20,
        loaded >> 20
    );
    DaemonServiceClient::new(channel.clone())
        .ping(PingRequest {})
        .await
        .expect("the daemon still answers");

    // Each Watch-flooded stream gets the first answer, at most one more that
    // had started to leave when the next Watch came, and then what is made
    // once it reads: two or three snapshots, or a gap and a snapshot where it
    // overflowed meanwhile — not a hundred.
    let marker = add_marker(&channel).await;
    for sub in &mut streams {
        let (snapshots, _) = read_until(sub, &marker).await;
        assert!(
            (2..=4).contains(&snapshots),
            "the Watches in between were replaced: {snapshots} snapshots"
        );
    }
    // The slow stream was ended at its bound, after what it had been sent,
    // and told where to resume; the rings no longer hold all it missed
    // (32 events of 1 MiB), so the resume says what was lost.
    let resume = loop {
        match slow.next_or_error().await {
            Ok(Some(_)) => {}
            Ok(None) => panic!("the slow stream ended with OK"),
            Err(status) => {
                assert_eq!(reason(&status), "LIMIT_EXCEEDED", "{status:?}");
                let info = status.get_details_error_info().expect("ErrorInfo");
                assert_eq!(info.metadata["limit"], "subscriber_buffer_bytes");
                break info.metadata["resume_after_seq"].parse::<u64>().unwrap();
            }
        }
    };
    let mut slow = open(
        daemon.channel().await,
        Watch {
            resume_after_seq: resume,
            ..Default::default()
        },
    )
    .await;
    let (_, gaps) = read_until(&mut slow, &marker).await;
    assert!(gaps >= 1, "the slow stream was told of its loss");
    // Every stream is live again.
    let marker = add_marker(&channel).await;
    for sub in streams.iter_mut().chain([&mut slow]) {
        let (snapshots, gaps) = read_until(sub, &marker).await;
        assert_eq!((snapshots, gaps), (0, 0), "the marker came as an event");
    }
    drop(tx);
    daemon.stop().await;
}
