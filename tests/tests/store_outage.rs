//! The database under the store goes away: PostgreSQL stopped, or frozen
//! with SIGSTOP (its connections hang rather than refuse). A breakpoint
//! write fails with `STORE_UNAVAILABLE` within its deadline; once the store
//! knows the database is down, writes fail at once while reads go on; when
//! the database is back, writes work again by themselves; and no write
//! whose caller was told it failed is ever committed — not when the
//! database comes back, not as a restarted daemon reads the store.
//!
//! Each test starts a PostgreSQL cluster of its own (`postgres::Cluster`),
//! so stopping it disturbs no other test.

use std::{
    collections::BTreeSet,
    process::Stdio,
    time::{Duration, Instant},
};

use stepd_e2e::{
    DEADLINE, Daemon, Subscription, TempDir,
    postgres::{self, Cluster},
    reason, source_spec, stepctl_bin,
};
use stepd_proto::v1::{
    AddBreakpointRequest, Breakpoint, BreakpointSpec, CheckStatus, DoctorRequest, GetStatusRequest,
    ListBreakpointsRequest, ListSessionsRequest, PingRequest, RemoveBreakpointRequest,
    UpdateBreakpointRequest, Watch, breakpoint_service_client::BreakpointServiceClient,
    breakpoint_spec::Location, daemon_service_client::DaemonServiceClient,
    session_service_client::SessionServiceClient,
};
use tonic::{Request, transport::Channel};

/// The deadline of the write that finds the database gone.
const FIRST: Duration = Duration::from_secs(3);

/// The deadline of the writes made once the database is known down: long,
/// so that a write that waited for it could not pass for one refused at
/// once.
const LONG: Duration = Duration::from_secs(10);

/// At once, on a loaded machine: far below `LONG`.
const AT_ONCE: Duration = Duration::from_millis(2500);

const FILE: &str = "/outage.py";

/// Every write made, by the line of its breakpoint: those acknowledged,
/// and those whose caller was told they failed.
#[derive(Default)]
struct Ledger {
    next_line: u32,
    kept: BTreeSet<u32>,
    failed: BTreeSet<u32>,
}

impl Ledger {
    fn line(&mut self) -> u32 {
        self.next_line += 1;
        self.next_line
    }

    /// Adds a breakpoint at a new line with `timeout` as its gRPC deadline,
    /// noting the outcome; how long it took.
    async fn add(
        &mut self,
        client: &BreakpointServiceClient<Channel>,
        timeout: Duration,
    ) -> (Result<Breakpoint, tonic::Status>, Duration) {
        let line = self.line();
        let (outcome, took) = add(client.clone(), line, timeout).await;
        self.note(line, &outcome);
        (outcome, took)
    }

    fn note(&mut self, line: u32, outcome: &Result<Breakpoint, tonic::Status>) {
        match outcome {
            Ok(_) => self.kept.insert(line),
            Err(_) => self.failed.insert(line),
        };
    }

    /// The lines of `listed` are exactly those acknowledged.
    fn check(&self, listed: &[Breakpoint], when: &str) {
        let lines: BTreeSet<u32> = listed.iter().map(line_of).collect();
        let committed_after_failing: Vec<&u32> = lines.intersection(&self.failed).collect();
        assert!(
            committed_after_failing.is_empty(),
            "{when}: writes whose callers were told they failed were committed: lines {committed_after_failing:?}"
        );
        assert_eq!(lines, self.kept, "{when}: the acknowledged writes");
    }
}

async fn add(
    mut client: BreakpointServiceClient<Channel>,
    line: u32,
    timeout: Duration,
) -> (Result<Breakpoint, tonic::Status>, Duration) {
    let mut request = Request::new(AddBreakpointRequest {
        spec: Some(source_spec(FILE, line)),
    });
    request.set_timeout(timeout);
    let started = Instant::now();
    let outcome = tokio::time::timeout(DEADLINE, client.add_breakpoint(request))
        .await
        .unwrap_or_else(|_| panic!("the add of line {line} hung past {DEADLINE:?}"))
        .map(|r| r.into_inner().breakpoint.expect("a breakpoint"));
    (outcome, started.elapsed())
}

fn line_of(breakpoint: &Breakpoint) -> u32 {
    match breakpoint.spec.as_ref().and_then(|s| s.location.as_ref()) {
        Some(Location::Source(source)) => source.line,
        other => panic!("not a source breakpoint: {other:?}"),
    }
}

async fn listed(client: &BreakpointServiceClient<Channel>) -> Vec<Breakpoint> {
    client
        .clone()
        .list_breakpoints(ListBreakpointsRequest::default())
        .await
        .expect("list")
        .into_inner()
        .breakpoints
}

/// Asserts a write was refused because the store is down, at once.
fn refused_at_once(what: &str, outcome: &Result<Breakpoint, tonic::Status>, took: Duration) {
    let status = outcome.as_ref().expect_err(what);
    assert_eq!(reason(status), "STORE_UNAVAILABLE", "{what}: {status:?}");
    assert!(
        status.message().contains("unreachable since"),
        "{what}: {status:?}"
    );
    assert!(took < AT_ONCE, "{what} took {took:?}");
}

/// `stepctl break add` (which sets no deadline) while the store is down:
/// its exit code for `STORE_UNAVAILABLE` (docs/errors.md), at once.
async fn stepctl_add(daemon: &Daemon, ledger: &mut Ledger) {
    let line = ledger.line();
    let started = Instant::now();
    let out = tokio::process::Command::new(stepctl_bin())
        .args(["break", "add", &format!("{FILE}:{line}")])
        .env("STEPD_ADDR", &daemon.addr)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run stepctl");
    let took = started.elapsed();
    ledger.failed.insert(line);
    assert_eq!(
        out.status.code(),
        Some(29),
        "stepctl break add: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(took < AT_ONCE, "stepctl break add took {took:?}");
}

/// An update and a removal of `breakpoint` while the database is down:
/// refused at once, and it stays as it was.
async fn changes_refused_at_once(
    client: &BreakpointServiceClient<Channel>,
    breakpoint: &Breakpoint,
) {
    let mut update = Request::new(UpdateBreakpointRequest {
        id: breakpoint.id.clone(),
        spec: Some(BreakpointSpec {
            enabled: Some(false),
            ..Default::default()
        }),
        update_mask: Some(prost_types::FieldMask {
            paths: vec!["enabled".into()],
        }),
    });
    update.set_timeout(LONG);
    let started = Instant::now();
    let outcome = client.clone().update_breakpoint(update).await;
    let outcome = outcome.map(|r| r.into_inner().breakpoint.expect("a breakpoint"));
    refused_at_once("an update", &outcome, started.elapsed());
    let mut remove = Request::new(RemoveBreakpointRequest {
        id: breakpoint.id.clone(),
    });
    remove.set_timeout(LONG);
    let started = Instant::now();
    let outcome = client.clone().remove_breakpoint(remove).await;
    let outcome = outcome.map(|r| r.into_inner().breakpoint.expect("a breakpoint"));
    refused_at_once("a removal", &outcome, started.elapsed());
    let listed = listed(client).await;
    let now = listed.iter().find(|b| b.id == breakpoint.id);
    assert_eq!(
        now.and_then(|b| b.spec.as_ref()?.enabled),
        Some(true),
        "{now:?}"
    );
}

/// Reads that do not need the database answer at once while it is down.
async fn reads_go_on(daemon: &Daemon, client: &BreakpointServiceClient<Channel>, ledger: &Ledger) {
    let started = Instant::now();
    ledger.check(&listed(client).await, "listed while the database is down");
    let channel = daemon.channel().await;
    let mut daemon_api = DaemonServiceClient::new(channel.clone());
    daemon_api.ping(PingRequest::default()).await.expect("ping");
    let status = daemon_api
        .get_status(GetStatusRequest::default())
        .await
        .expect("status")
        .into_inner();
    assert_eq!(status.breakpoints as usize, ledger.kept.len());
    SessionServiceClient::new(channel.clone())
        .list_sessions(ListSessionsRequest::default())
        .await
        .expect("sessions");
    let mut sub = Subscription::open(channel, Watch::default()).await;
    sub.next().await;
    let took = started.elapsed();
    assert!(took < 2 * AT_ONCE, "the reads took {took:?}");
    // Doctor says why writes are refused.
    let doctor = daemon_api
        .doctor(DoctorRequest::default())
        .await
        .expect("doctor")
        .into_inner();
    let store = doctor.store.expect("a store check");
    assert_eq!(store.status, CheckStatus::Broken as i32, "{store:?}");
    assert!(store.message.contains("unreachable since"), "{store:?}");
}

/// The whole outage: `down` takes the database away, `up` brings it back.
async fn outage(test: &str, down: fn(&mut Cluster), up: fn(&mut Cluster)) {
    let mut cluster = Cluster::start();
    let url = postgres::database_on(cluster.url(), test);
    let dir = TempDir::new("outage");
    let args = ["--database-url", url.as_str()];
    let daemon = Daemon::start_in(dir.path(), &args).await;
    let client = BreakpointServiceClient::new(daemon.channel().await);
    let mut ledger = Ledger::default();

    let (before, _) = ledger.add(&client, LONG).await;
    let kept_before = before.expect("a write while the database is up");

    down(&mut cluster);

    // The write that finds the database gone fails, within its deadline,
    // saying why.
    let (first, took) = ledger.add(&client, FIRST).await;
    let status = first.expect_err("no write while the database is down");
    assert_eq!(reason(&status), "STORE_UNAVAILABLE", "{status:?}");
    assert!(took < FIRST + Duration::from_secs(2), "took {took:?}");
    eprintln!(
        "the first write failed after {took:?}: {}",
        status.message()
    );

    // The store learns the database is down (its probe confirms it within
    // seconds); from then on writes fail at once. Each attempt until then
    // is a write whose caller is told it failed, like any other.
    let waiting = Instant::now();
    loop {
        let (outcome, took) = ledger.add(&client, FIRST).await;
        let status = outcome.expect_err("no write while the database is down");
        if status.message().contains("unreachable since") && took < AT_ONCE {
            eprintln!(
                "known down {:?} after the first failure: {}",
                waiting.elapsed(),
                status.message()
            );
            break;
        }
        assert!(
            waiting.elapsed() < DEADLINE,
            "writes still wait for the database: {status:?} after {took:?}"
        );
    }

    // Several at once, then one after another: none waits for another.
    let mut slowest = Duration::ZERO;
    let together: Vec<_> = (0..8)
        .map(|_| {
            let line = ledger.line();
            (line, tokio::spawn(add(client.clone(), line, LONG)))
        })
        .collect();
    for (line, write) in together {
        let (outcome, took) = write.await.unwrap();
        ledger.note(line, &outcome);
        refused_at_once(&format!("write {line}, made with 7 others"), &outcome, took);
        slowest = slowest.max(took);
    }
    for _ in 0..3 {
        let (outcome, took) = ledger.add(&client, LONG).await;
        refused_at_once("a write one after another", &outcome, took);
        slowest = slowest.max(took);
    }
    stepctl_add(&daemon, &mut ledger).await;
    eprintln!("writes refused at once, the slowest after {slowest:?}");
    changes_refused_at_once(&client, &kept_before).await;

    reads_go_on(&daemon, &client, &ledger).await;

    up(&mut cluster);

    // Writes work again by themselves.
    let back = Instant::now();
    loop {
        let (outcome, _) = ledger.add(&client, LONG).await;
        if outcome.is_ok() {
            eprintln!("writes work again {:?} after the database", back.elapsed());
            break;
        }
        assert!(
            back.elapsed() < DEADLINE,
            "writes did not work again: {outcome:?}"
        );
        // Each attempt is refused at once until the store's probe finds
        // the database back: try again now and then, not in a busy loop.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The writer commits in the order writes reach it, so every write made
    // before the last has been committed or dropped by now.
    ledger.check(&listed(&client).await, "listed once the database is back");
    let rows = postgres::query(&url, "SELECT COUNT(*) FROM breakpoints");
    assert_eq!(rows, ledger.kept.len().to_string(), "rows in the database");

    daemon.stop().await;
    let daemon = Daemon::start_in(dir.path(), &args).await;
    let client = BreakpointServiceClient::new(daemon.channel().await);
    ledger.check(&listed(&client).await, "listed after a restart");
    eprintln!(
        "{} writes acknowledged, {} refused, none of them kept",
        ledger.kept.len(),
        ledger.failed.len()
    );
    daemon.stop().await;
}

#[tokio::test]
async fn writes_fail_fast_while_postgresql_is_stopped_and_none_that_failed_is_kept() {
    outage(
        "outage_stopped",
        |cluster| cluster.stop(),
        |cluster| cluster.restart(),
    )
    .await;
}

#[tokio::test]
async fn writes_fail_fast_while_postgresql_is_frozen_and_none_that_failed_is_kept() {
    outage("outage_frozen", Cluster::freeze, Cluster::thaw).await;
}
