//! Replicas sharing one PostgreSQL database (`--database-url postgres://…`):
//! what one replica changes, every replica applies and announces.

use std::time::{Duration, Instant};

use stepd_e2e::{DEADLINE, Daemon, Subscription, dap, postgres, probe::Probe};
use stepd_proto::v1::{
    Breakpoint, BreakpointAction, BreakpointChange, BreakpointSpec, Hit, ListBreakpointsRequest,
    PointInfo, ProbeMatch, RemoveBreakpointRequest, UpdateBreakpointRequest, Watch,
    breakpoint_service_client::BreakpointServiceClient, breakpoint_spec::Location,
    connect_request::Message as In, connect_response::Message as Out, event::Payload,
};

async fn replica(url: &str) -> (Daemon, Subscription) {
    let daemon = Daemon::start(&["--database-url", url]).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    (daemon, sub)
}

/// The next `breakpoint_updated` of `change` on a stream, and how long it
/// took from `since`.
async fn change_of(
    sub: &mut Subscription,
    change: BreakpointChange,
    since: Instant,
) -> (Breakpoint, Duration) {
    let event = sub
        .wait_for("a breakpoint change", |e| {
            matches!(&e.payload, Some(Payload::BreakpointUpdated(u)) if u.change == change as i32)
        })
        .await;
    let Some(Payload::BreakpointUpdated(update)) = event.payload else {
        unreachable!()
    };
    (update.breakpoint.unwrap(), since.elapsed())
}

fn tool_calls() -> BreakpointSpec {
    BreakpointSpec {
        location: Some(Location::Probe(ProbeMatch {
            point_kind: "tool_call".into(),
            name_glob: "*".into(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

async fn listed(daemon: &Daemon) -> Vec<Breakpoint> {
    BreakpointServiceClient::new(daemon.channel().await)
        .list_breakpoints(ListBreakpointsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .breakpoints
}

#[tokio::test]
async fn a_breakpoint_changed_on_one_replica_is_changed_on_every_replica() {
    let url = postgres::database("replicas_change");
    let (a, mut on_a) = replica(&url).await;
    let (b, mut on_b) = replica(&url).await;

    let started = Instant::now();
    let id = dap::add_breakpoint(&a, tool_calls()).await;
    let (added, took) = change_of(&mut on_b, BreakpointChange::Added, started).await;
    assert_eq!(added.id, id);
    eprintln!("added on A, announced on B after {took:?}");

    let started = Instant::now();
    BreakpointServiceClient::new(b.channel().await)
        .update_breakpoint(UpdateBreakpointRequest {
            id: id.clone(),
            spec: Some(BreakpointSpec {
                enabled: Some(false),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["enabled".into()],
            }),
        })
        .await
        .unwrap();
    // A announces its own add once, not again when the database echoes it:
    // the echo would come before B's update, which was committed after it.
    let mut adds_on_a = 0;
    let event = on_a
        .wait_for("B's update on A", |e| match &e.payload {
            Some(Payload::BreakpointUpdated(u)) => {
                adds_on_a += usize::from(u.change == BreakpointChange::Added as i32);
                u.change == BreakpointChange::Updated as i32
            }
            _ => false,
        })
        .await;
    assert_eq!(adds_on_a, 1);
    let Some(Payload::BreakpointUpdated(update)) = event.payload else {
        unreachable!()
    };
    let updated = update.breakpoint.unwrap();
    assert_eq!(updated.id, id);
    assert_eq!(updated.spec.unwrap().enabled, Some(false));
    eprintln!("updated on B, announced on A after {:?}", started.elapsed());
    assert_eq!(
        listed(&a).await[0].spec.as_ref().unwrap().enabled,
        Some(false)
    );

    // A replica started later loads what the others made.
    let (c, mut on_c) = replica(&url).await;
    assert_eq!(listed(&c).await.len(), 1);

    let started = Instant::now();
    BreakpointServiceClient::new(a.channel().await)
        .remove_breakpoint(RemoveBreakpointRequest { id: id.clone() })
        .await
        .unwrap();
    for sub in [&mut on_b, &mut on_c] {
        let (removed, _) = change_of(sub, BreakpointChange::Removed, started).await;
        assert_eq!(removed.id, id);
    }
    assert!(listed(&b).await.is_empty());
    assert!(listed(&c).await.is_empty());
    for daemon in [a, b, c] {
        daemon.stop().await;
    }
}

/// Sends a hit at a tool call and waits for the probe to be resumed.
async fn log_hit(probe: &mut Probe, hit_id: &str, breakpoint: &str) {
    probe
        .send(In::Hit(Hit {
            hit_id: hit_id.into(),
            point: Some(PointInfo {
                kind: "tool_call".into(),
                name: "Bash".into(),
                ..Default::default()
            }),
            breakpoint_ids: vec![breakpoint.into()],
            ..Default::default()
        }))
        .await;
    tokio::time::timeout(DEADLINE, async {
        loop {
            if let Out::Resume(r) = stepd_e2e::probe::next(&mut probe.rx).await {
                assert_eq!(r.hit_id, hit_id);
                return;
            }
        }
    })
    .await
    .expect("resumed");
}

#[tokio::test]
async fn hits_on_every_replica_count_toward_one_max_hits() {
    let url = postgres::database("replicas_hits");
    let (a, mut on_a) = replica(&url).await;
    let (b, mut on_b) = replica(&url).await;
    let mut spec = tool_calls();
    spec.action = BreakpointAction::Log as i32;
    spec.log_message = "ran {name}".into();
    spec.max_hits = 3;
    let id = dap::add_breakpoint(&a, spec).await;
    change_of(&mut on_b, BreakpointChange::Added, Instant::now()).await;

    let (mut probe_a, _) = Probe::connect(&a, &[]).await;
    let (mut probe_b, _) = Probe::connect(&b, &[]).await;
    log_hit(&mut probe_a, "a1", &id).await;
    log_hit(&mut probe_a, "a2", &id).await;
    // B learns of A's two hits, then its own hit is the third: spent there,
    // and A learns of it.
    on_b.wait_for("A's hits on B", |e| {
        matches!(&e.payload, Some(Payload::BreakpointUpdated(u))
            if u.change == BreakpointChange::Hit as i32
                && u.breakpoint.as_ref().is_some_and(|b| b.hit_count == 2))
    })
    .await;
    log_hit(&mut probe_b, "b1", &id).await;
    for sub in [&mut on_a, &mut on_b] {
        sub.wait_for("the breakpoint spent", |e| {
            matches!(&e.payload, Some(Payload::BreakpointUpdated(u))
                if u.breakpoint.as_ref().is_some_and(|b| b.hit_count == 3 && b.spent))
        })
        .await;
    }
    for daemon in [&a, &b] {
        let listed = listed(daemon).await;
        assert_eq!((listed[0].hit_count, listed[0].spent), (3, true));
    }
    drop((probe_a, probe_b));
    a.stop().await;
    b.stop().await;
}
