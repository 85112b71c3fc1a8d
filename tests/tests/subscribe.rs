//! EventService.Subscribe: snapshot then events, fan-out, resume, slow
//! subscribers, heartbeats, debug input routing, caps.

use stepd_e2e::{DEADLINE, Daemon, Subscription, reason, source_spec};
use stepd_proto::v1::{
    AddBreakpointRequest, BreakpointChange, DebugCommand, DebugInput, ErrorReason, Event,
    EventChannel, GetStatusRequest, NextCommand, Watch,
    breakpoint_service_client::BreakpointServiceClient, daemon_service_client::DaemonServiceClient,
    debug_command::Command, event::Payload, subscribe_request::Message,
};
use tonic::{Code, transport::Channel};

fn snapshot_seq(event: &Event) -> u64 {
    match &event.payload {
        Some(Payload::Snapshot(s)) => s.seq,
        other => panic!("expected a snapshot, got {other:?}"),
    }
}

fn added_id(event: &Event) -> String {
    match &event.payload {
        Some(Payload::BreakpointUpdated(u)) => {
            assert_eq!(u.change, BreakpointChange::Added as i32);
            u.breakpoint.as_ref().unwrap().id.clone()
        }
        other => panic!("expected breakpoint_updated, got {other:?}"),
    }
}

async fn add_n(channel: Channel, n: u32, condition_len: usize) -> Vec<String> {
    let mut client = BreakpointServiceClient::new(channel);
    let mut ids = Vec::new();
    for line in 1..=n {
        let mut spec = source_spec("/load.py", line);
        spec.condition = "c".repeat(condition_len);
        ids.push(
            client
                .add_breakpoint(AddBreakpointRequest { spec: Some(spec) })
                .await
                .unwrap()
                .into_inner()
                .breakpoint
                .unwrap()
                .id,
        );
    }
    ids
}

#[tokio::test]
async fn snapshot_first_then_events_in_order_to_every_subscriber() {
    let daemon = Daemon::start(&[]).await;
    let channel = daemon.channel().await;
    let before = add_n(channel.clone(), 2, 0).await;

    let mut one = Subscription::open(daemon.channel().await, Watch::default()).await;
    let mut two = Subscription::open(daemon.channel().await, Watch::default()).await;
    for sub in [&mut one, &mut two] {
        let first = sub.next().await;
        let Some(Payload::Snapshot(snapshot)) = &first.payload else {
            panic!("first message must be a snapshot: {first:?}");
        };
        let ids: Vec<_> = snapshot.breakpoints.iter().map(|b| b.id.clone()).collect();
        assert_eq!(ids, before, "the snapshot has the state before subscribing");
    }

    let after = add_n(channel, 5, 0).await;
    for sub in [&mut one, &mut two] {
        let mut last = 0;
        for id in &after {
            let event = sub.next().await;
            assert!(event.seq > last, "seq strictly increases");
            last = event.seq;
            assert!(
                event.session_id.is_empty(),
                "breakpoint list changes are daemon-level"
            );
            assert_eq!(&added_id(&event), id);
        }
    }
    daemon.stop().await;
}

#[tokio::test]
async fn resume_after_seq_replays_exactly_what_was_missed() {
    let daemon = Daemon::start(&[]).await;
    let channel = daemon.channel().await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    let start = snapshot_seq(&sub.next().await);
    let first = add_n(channel.clone(), 2, 0).await;
    let mut cursor = start;
    let mut instance = String::new();
    for id in &first {
        let e = sub.next().await;
        assert_eq!(&added_id(&e), id);
        cursor = e.seq;
    }
    drop(sub);

    let missed = add_n(channel.clone(), 3, 0).await;
    let watch = Watch {
        resume_after_seq: cursor,
        ..Default::default()
    };
    let mut resumed = Subscription::open(daemon.channel().await, watch).await;
    for id in &missed {
        let e = resumed.next().await;
        assert!(e.seq > cursor);
        assert_eq!(
            &added_id(&e),
            id,
            "missed events come first, in order, no snapshot"
        );
        cursor = e.seq;
    }
    let live = add_n(channel, 1, 0).await;
    let e = resumed.next().await;
    assert_eq!(added_id(&e), live[0], "then live events, nothing twice");

    // A cursor from another daemon instance is never trusted.
    if let Some(Payload::Snapshot(s)) = Subscription::open(daemon.channel().await, Watch::default())
        .await
        .next()
        .await
        .payload
    {
        instance = s.instance_id;
    }
    let foreign = Watch {
        resume_after_seq: cursor,
        resume_instance_id: format!("not-{instance}"),
        ..Default::default()
    };
    let mut other = Subscription::open(daemon.channel().await, foreign).await;
    assert!(matches!(other.next().await.payload, Some(Payload::Gap(_))));
    assert_eq!(snapshot_seq(&other.next().await), e.seq);
    daemon.stop().await;
}

#[tokio::test]
async fn a_resume_point_no_longer_held_gets_gap_then_snapshot() {
    let daemon = Daemon::start(&["--ring-capacity", "4"]).await;
    let channel = daemon.channel().await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    let cursor = snapshot_seq(&sub.next().await);
    drop(sub);
    let ids = add_n(channel, 10, 0).await;
    let watch = Watch {
        resume_after_seq: cursor,
        ..Default::default()
    };
    let mut resumed = Subscription::open(daemon.channel().await, watch).await;
    let gap = resumed.next().await;
    let Some(Payload::Gap(gap)) = gap.payload else {
        panic!("expected a gap, got {gap:?}");
    };
    assert_eq!(gap.from_seq, cursor + 1);
    let snapshot = resumed.next().await;
    assert_eq!(snapshot_seq(&snapshot), gap.to_seq);
    let Some(Payload::Snapshot(s)) = snapshot.payload else {
        unreachable!()
    };
    assert_eq!(
        s.breakpoints.len(),
        ids.len(),
        "the snapshot has everything"
    );
    daemon.stop().await;
}

#[tokio::test]
async fn a_slow_subscriber_gets_gap_and_snapshot_and_slows_nobody() {
    let daemon = Daemon::start(&["--subscriber-buffer", "32"]).await;
    // The slow client's HTTP/2 windows are small, so the daemon soon cannot
    // write to it and it falls behind the shared buffer.
    let mut slow = Subscription::open(daemon.small_window_channel().await, Watch::default()).await;
    snapshot_seq(&slow.next().await);
    let mut fast = Subscription::open(daemon.channel().await, Watch::default()).await;
    snapshot_seq(&fast.next().await);

    const N: u32 = 600;
    let reader = tokio::spawn(async move {
        let mut ids = Vec::new();
        while ids.len() < N as usize {
            let e = fast.next().await;
            match e.payload {
                Some(Payload::BreakpointUpdated(u)) => ids.push(u.breakpoint.unwrap().id),
                other => panic!("the fast subscriber must see no gap: {other:?}"),
            }
        }
        ids
    });
    let added = add_n(daemon.channel().await, N, 2048).await;
    let seen = tokio::time::timeout(DEADLINE, reader)
        .await
        .expect("the fast subscriber kept up")
        .unwrap();
    assert_eq!(seen, added, "the fast subscriber saw every event in order");

    // Now the slow one reads: what was buffered, then a gap and a snapshot.
    let mut last_seq = 0;
    loop {
        let e = slow.next().await;
        match e.payload {
            Some(Payload::BreakpointUpdated(_)) => {
                assert!(e.seq > last_seq);
                last_seq = e.seq;
            }
            Some(Payload::Gap(gap)) => {
                assert_eq!(
                    gap.from_seq,
                    last_seq + 1,
                    "the gap starts right after what it saw"
                );
                let snapshot = slow.next().await;
                assert_eq!(snapshot_seq(&snapshot), gap.to_seq);
                let Some(Payload::Snapshot(s)) = snapshot.payload else {
                    unreachable!()
                };
                assert_eq!(s.breakpoints.len(), added.len());
                // GetStatus counts what the slow one lost and the gap it got.
                let status = DaemonServiceClient::new(daemon.channel().await)
                    .get_status(GetStatusRequest {})
                    .await
                    .unwrap()
                    .into_inner();
                assert_eq!(
                    status.events_dropped,
                    gap.to_seq - gap.from_seq + 1,
                    "{status:?} after {gap:?}"
                );
                assert_eq!(status.gaps_sent, 1);
                assert!(status.events_published >= u64::from(N));
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    daemon.stop().await;
}

#[tokio::test]
async fn quiet_streams_get_heartbeats() {
    let daemon = Daemon::start(&["--heartbeat-interval", "200ms"]).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    let seq = snapshot_seq(&sub.next().await);
    let e = sub.next().await;
    let Some(Payload::Heartbeat(h)) = e.payload else {
        panic!("expected a heartbeat, got {e:?}");
    };
    assert_eq!(h.last_seq, seq);
    assert_eq!(e.seq, 0, "heartbeats are stream-local");
    daemon.stop().await;
}

#[tokio::test]
async fn debug_input_for_an_unknown_key_answers_pause_not_found_on_the_stream() {
    let daemon = Daemon::start(&[]).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    snapshot_seq(&sub.next().await);
    sub.send(Message::DebugInput(DebugInput {
        key: "no-such-pause".into(),
        command: Some(DebugCommand {
            command: Some(Command::Next(NextCommand {})),
        }),
        client_name: String::new(),
    }))
    .await;
    let e = sub.next().await;
    let Some(Payload::Error(err)) = e.payload else {
        panic!("expected an error event, got {e:?}");
    };
    assert_eq!(err.reason, ErrorReason::PauseNotFound as i32);
    assert_eq!(err.code, Code::NotFound as i32);
    assert_eq!(err.key, "no-such-pause");

    // A DebugInput without a command is malformed, not ignored.
    sub.send(Message::DebugInput(DebugInput {
        key: "k".into(),
        command: None,
        client_name: String::new(),
    }))
    .await;
    let Some(Payload::Error(err)) = sub.next().await.payload else {
        panic!("expected an error event");
    };
    assert_eq!(err.reason, ErrorReason::InvalidArgument as i32);
    daemon.stop().await;
}

#[tokio::test]
async fn a_new_watch_replaces_the_filter() {
    let daemon = Daemon::start(&[]).await;
    let channel = daemon.channel().await;
    let only_output = Watch {
        channels: vec![EventChannel::Output as i32],
        ..Default::default()
    };
    let mut sub = Subscription::open(daemon.channel().await, only_output).await;
    snapshot_seq(&sub.next().await);
    add_n(channel.clone(), 1, 0).await;
    // Re-filter to breakpoints: a fresh snapshot, then breakpoint events only.
    sub.send(Message::Watch(Watch {
        channels: vec![EventChannel::Breakpoints as i32],
        ..Default::default()
    }))
    .await;
    let Some(Payload::Snapshot(s)) = sub.next().await.payload else {
        panic!("a Watch is answered with a snapshot");
    };
    assert_eq!(
        s.breakpoints.len(),
        1,
        "the filtered-out event was not delivered"
    );
    let ids = add_n(channel, 1, 0).await;
    assert_eq!(added_id(&sub.next().await), ids[0]);
    daemon.stop().await;
}

#[tokio::test]
async fn a_half_closed_client_keeps_receiving() {
    let daemon = Daemon::start(&[]).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    snapshot_seq(&sub.next().await);
    let (tx, _) = tokio::sync::mpsc::channel(1);
    drop(std::mem::replace(&mut sub.tx, tx)); // the client sends nothing more
    let ids = add_n(daemon.channel().await, 1, 0).await;
    assert_eq!(added_id(&sub.next().await), ids[0]);
    daemon.stop().await;
}

#[tokio::test]
async fn subscribers_beyond_the_cap_are_refused() {
    let daemon = Daemon::start(&["--max-subscribers", "1"]).await;
    let mut first = Subscription::open(daemon.channel().await, Watch::default()).await;
    snapshot_seq(&first.next().await);
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let _tx = tx;
    let err =
        stepd_proto::v1::event_service_client::EventServiceClient::new(daemon.channel().await)
            .subscribe(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(reason(&err), "LIMIT_EXCEEDED");
    daemon.stop().await;
}
