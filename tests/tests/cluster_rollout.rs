//! A rolling restart of three replicas behind HAProxy while 20 probe
//! programs (Python and Go) are held: each replica in turn is told to stop
//! (SIGTERM) and started again on its address; the programs reconnect
//! through the proxy and re-report their holds. None is released, every
//! replica lists exactly the 20 holds after each step, and each answer
//! given after the rollout reaches its program.

use std::time::Instant;

use stepd_e2e::{
    DEADLINE, Daemon, Program, Subscription, TempDir, dap, haproxy::Haproxy, held, postgres,
};
use stepd_proto::v1::{
    BreakpointChange, ListPausesRequest, Pause, Watch, event::Payload,
    session_service_client::SessionServiceClient,
};

/// Held programs of each language.
const EACH: usize = 10;

async fn pauses(daemon: &Daemon) -> Vec<Pause> {
    SessionServiceClient::new(daemon.channel().await)
        .list_pauses(ListPausesRequest::default())
        .await
        .expect("list pauses")
        .into_inner()
        .pauses
}

/// Each replica's instance id.
async fn ids(replicas: &[Daemon]) -> Vec<String> {
    let mut ids = Vec::new();
    for daemon in replicas {
        let pong = stepd_proto::v1::daemon_service_client::DaemonServiceClient::new(
            daemon.channel().await,
        )
        .ping(stepd_proto::v1::PingRequest::default())
        .await
        .expect("ping")
        .into_inner();
        ids.push(pong.instance_id);
    }
    ids
}

/// Waits until every replica lists the same `n` pauses, each held by a
/// running replica (the programs re-reported what the stopped one held),
/// and checks that none ever lists more: a held request is one pending
/// pause.
async fn listed_everywhere(replicas: &[Daemon], n: usize, when: &str) {
    let running = ids(replicas).await;
    let deadline = Instant::now() + DEADLINE;
    loop {
        let mut listed = Vec::new();
        let mut held_by_running = true;
        for daemon in replicas {
            let pauses = pauses(daemon).await;
            held_by_running &= pauses.iter().all(|p| running.contains(&p.replica_id));
            let mut keys: Vec<String> = pauses.into_iter().map(|p| p.key).collect();
            keys.sort();
            listed.push(keys);
        }
        let counts: Vec<usize> = listed.iter().map(Vec::len).collect();
        assert!(
            counts.iter().all(|c| *c <= n),
            "{when}: the replicas list {counts:?} pauses for {n} holds"
        );
        if held_by_running
            && counts.iter().all(|c| *c == n)
            && listed.iter().all(|l| *l == listed[0])
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{when}: the replicas list {listed:#?}, not the same {n} each"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn a_rolling_restart_behind_haproxy_releases_no_hold_and_loses_no_answer() {
    let url = postgres::database("cluster_rollout");
    let args = ["--database-url", url.as_str(), "--replica-lease", "3s"];
    let dirs: Vec<TempDir> = (0..3).map(|_| TempDir::new("roll")).collect();
    let mut replicas = Vec::new();
    for dir in &dirs {
        replicas.push(Daemon::start_in(dir.path(), &args).await);
    }
    let addrs: Vec<String> = replicas.iter().map(|d| d.addr.clone()).collect();
    let proxy = Haproxy::balance(&addrs.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let mut subs = Vec::new();
    for daemon in &replicas {
        let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
        sub.next().await;
        subs.push(sub);
    }
    dap::add_breakpoint(&replicas[0], held::bash_breakpoint()).await;
    for sub in &mut subs {
        sub.wait_for("the breakpoint added", |e| {
            matches!(&e.payload, Some(Payload::BreakpointUpdated(u))
                if u.change == BreakpointChange::Added as i32)
        })
        .await;
    }
    drop(subs);
    let mut programs: Vec<(Program, &str)> = Vec::new();
    for _ in 0..EACH {
        let (python, go) = held::programs(&proxy.addr, &[]);
        programs.push((python, "python"));
        programs.push((go, "go"));
    }
    let mut first_sessions = Vec::new();
    for (program, _) in &mut programs {
        let line = program.line().await;
        let session = line.strip_prefix("session ").expect("a session line");
        first_sessions.push(session.to_owned());
    }
    let total = programs.len();
    listed_everywhere(&replicas, total, "before the rollout").await;

    let started = Instant::now();
    for i in 0..replicas.len() {
        let old = &mut replicas[i];
        old.signal("TERM");
        assert!(old.wait_exit(DEADLINE).await.success());
        let new = Daemon::spawn(
            Daemon::command_on(dirs[i].path(), &addrs[i], &args),
            dirs[i].path(),
        )
        .await;
        replicas[i] = new;
        listed_everywhere(&replicas, total, &format!("after restarting replica {i}")).await;
    }
    eprintln!("rolled three replicas in {:?}", started.elapsed());

    // Every hold is answered once, each on the next replica round the
    // ring from the one listing it, and each program gets the answer.
    let listed = pauses(&replicas[0]).await;
    assert_eq!(listed.len(), total);
    for (n, pause) in listed.iter().enumerate() {
        let lang = held::payload(pause)["lang"]
            .as_str()
            .expect("a language")
            .to_owned();
        held::inject(&replicas[n % 3], pause, &lang).await;
    }
    for (program, lang) in &mut programs {
        let expected = match *lang {
            "python" => r#"result {"cmd": "injected", "lang": "python"}"#,
            _ => r#"result {"cmd":"injected","lang":"go"}"#,
        };
        assert_eq!(program.line().await, expected, "the {lang} program");
    }
    // Each program's first session ended once, by its replica's shutdown.
    for session in &first_sessions {
        let events = stepd_proto::v1::history_service_client::HistoryServiceClient::new(
            replicas[0].channel().await,
        )
        .get_session_history(stepd_proto::v1::GetSessionHistoryRequest {
            session_id: session.clone(),
            page_size: 1000,
            ..Default::default()
        })
        .await
        .expect("history")
        .into_inner()
        .events;
        let ends: Vec<_> = events
            .iter()
            .filter_map(|e| match &e.payload {
                Some(Payload::SessionEnded(end)) => Some(end.reason),
                _ => None,
            })
            .collect();
        assert_eq!(
            ends,
            vec![stepd_proto::v1::EndReason::DaemonShutdown as i32],
            "{session}: {events:#?}"
        );
        assert!(
            matches!(
                events.last().and_then(|e| e.payload.as_ref()),
                Some(Payload::SessionEnded(_))
            ),
            "the end is last: {events:#?}"
        );
    }
    drop(programs);
    drop(proxy);
    for daemon in replicas {
        daemon.stop().await;
    }
}
