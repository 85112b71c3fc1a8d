use prost::Message as _;
use stepd_proto::v1::{Notification, Snapshot, SubscribeResponse};
use tokio_stream::wrappers::ReceiverStream;

use super::*;
use stepd_core::{events::SubscriberMemory, slots::Slots};

fn subscriber(bus: Arc<EventBus>, memory: &Arc<SubscriberMemory>) -> Subscriber {
    Subscriber {
        bus,
        answer: Arc::new(|_, _| Box::pin(async { Ok(()) })),
        shutdown: CancellationToken::new(),
        heartbeat: Duration::from_secs(3600),
        client_name: "test".into(),
        buffer_events: 1000,
        buffer_bytes: 1 << 20,
        part_bytes: 1 << 20,
        max_message_bytes: 16 << 20,
        transport_window: 1 << 20,
        memory: memory.stream(Slots::unlimited("test").take("t").unwrap()),
        only_own: None,
    }
}

/// A client's side of a stream: it reads a message by taking it off the
/// HTTP/2 stream, and does not read by leaving it there.
struct Client {
    rx: mpsc::UnboundedReceiver<Result<Bytes, Status>>,
}

impl Client {
    /// Starts `subscriber`; the client sends what goes into the sender.
    fn start(subscriber: Subscriber) -> (Self, mpsc::Sender<Result<SubscribeRequest, Status>>) {
        let (in_tx, in_rx) = mpsc::channel(128);
        let (out, rx) = mpsc::unbounded_channel();
        tokio::spawn(subscriber.run(ReceiverStream::new(in_rx), out));
        (Self { rx }, in_tx)
    }

    /// The next message, or the status the stream ended with.
    async fn next_or_end(&mut self) -> Result<Event, Status> {
        let message = tokio::time::timeout(Duration::from_secs(10), self.rx.recv())
            .await
            .expect("a message in time")
            .unwrap_or_else(|| Err(Status::ok("")))?;
        let response = SubscribeResponse::decode(&message[5..]).expect("a response");
        Ok(response.event.expect("an event"))
    }

    async fn next_event(&mut self) -> Event {
        self.next_or_end().await.expect("not the end")
    }

    async fn next(&mut self) -> Payload {
        self.next_event().await.payload.expect("a payload")
    }
}

fn watch() -> Result<SubscribeRequest, Status> {
    Ok(SubscribeRequest {
        message: Some(Message::Watch(Watch::default())),
    })
}

fn note(bus: &EventBus, bytes: usize) -> u64 {
    bus.publish(
        "",
        Payload::Notification(Notification {
            message: "x".repeat(bytes),
            ..Default::default()
        }),
    )
    .seq
}

/// Waits until the subscriber has taken every client message.
async fn drained(tx: &mpsc::Sender<Result<SubscribeRequest, Status>>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while tx.capacity() < tx.max_capacity() {
        assert!(Instant::now() < deadline, "the subscriber stopped reading");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until `memory` holds `bytes`.
async fn holds(memory: &StreamMemory, check: impl Fn(usize) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check(memory.held()) {
        assert!(Instant::now() < deadline, "held {}", memory.held());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn watches_a_client_does_not_read_replace_each_others_snapshots() {
    let bus = Arc::new(EventBus::new("i".into(), 1, 64, 64));
    let memory = SubscriberMemory::new(usize::MAX);
    let (mut client, in_tx) = Client::start(Subscriber {
        // One message at a time in the HTTP/2 stream.
        transport_window: 1,
        ..subscriber(bus.clone(), &memory)
    });
    for _ in 0..100 {
        in_tx.send(watch()).await.unwrap();
    }
    drained(&in_tx).await;
    let last = note(&bus, 10);
    // The first answer was already on its way; of the 99 others only the
    // last is made, once the client reads, so it already holds the event.
    let Payload::Snapshot(Snapshot { seq: first, .. }) = client.next().await else {
        panic!("expected the first Watch's snapshot")
    };
    assert!(first < last);
    let Payload::Snapshot(Snapshot { seq, .. }) = client.next().await else {
        panic!("expected the last Watch's snapshot")
    };
    assert_eq!(seq, last);
    let after = note(&bus, 10);
    let Payload::Notification(_) = client.next().await else {
        panic!("expected the event after the snapshot")
    };
    assert!(after > seq);
    assert!(client.rx.try_recv().is_err(), "nothing more");
}

#[tokio::test]
async fn a_flood_of_other_sessions_passes_a_narrow_watch_by_in_order() {
    let bus = Arc::new(EventBus::new("i".into(), 1, 4096, 64));
    let memory = SubscriberMemory::new(usize::MAX);
    let (mut client, in_tx) = Client::start(subscriber(bus.clone(), &memory));
    in_tx
        .send(Ok(SubscribeRequest {
            message: Some(Message::Watch(Watch {
                session_ids: vec!["a".into()],
                ..Default::default()
            })),
        }))
        .await
        .unwrap();
    let Payload::Snapshot(_) = client.next().await else {
        panic!("expected a snapshot")
    };
    // More events of another session than one pass takes, with the
    // watched session's among them: those arrive, in order, and no gap.
    let mut mine = Vec::new();
    for i in 0..3 * LIVE_BATCH {
        let sid = if i % 100 == 99 { "a" } else { "b" };
        let seq = bus
            .publish(sid, Payload::Notification(Notification::default()))
            .seq;
        if sid == "a" {
            mine.push(seq);
        }
    }
    let mut seen = Vec::new();
    while seen.len() < mine.len() {
        let event = client.next_event().await;
        assert!(
            matches!(event.payload, Some(Payload::Notification(_))),
            "{event:?}"
        );
        assert_eq!(event.session_id, "a");
        seen.push(event.seq);
    }
    assert_eq!(seen, mine);
}

#[tokio::test]
async fn a_subscriber_over_its_count_gets_a_gap_then_a_snapshot() {
    let bus = Arc::new(EventBus::new("i".into(), 1, 4096, 64));
    let memory = SubscriberMemory::new(usize::MAX);
    let (mut client, in_tx) = Client::start(Subscriber {
        buffer_events: 4,
        transport_window: 1,
        ..subscriber(bus.clone(), &memory)
    });
    in_tx.send(watch()).await.unwrap();
    let Payload::Snapshot(snapshot) = client.next().await else {
        panic!("expected a snapshot")
    };
    // Ten events: the first is handed over, four are queued, the sixth
    // overflows and everything queued is dropped.
    let seqs: Vec<u64> = (0..10).map(|_| note(&bus, 100)).collect();
    assert!(seqs[0] > snapshot.seq);
    let mut seen = Vec::new();
    let gap = loop {
        match client.next().await {
            Payload::Notification(_) => seen.push(()),
            Payload::Gap(gap) => break gap,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert!(!seen.is_empty() && seen.len() < 10, "{}", seen.len());
    assert_eq!(
        gap.from_seq,
        seqs[seen.len()],
        "the gap starts at the first event dropped"
    );
    assert_eq!(gap.to_seq, *seqs.last().unwrap());
    let Payload::Snapshot(after) = client.next().await else {
        panic!("expected a snapshot after the gap")
    };
    assert_eq!(after.seq, gap.to_seq);
    let later = note(&bus, 10);
    let Payload::Notification(_) = client.next().await else {
        panic!("the stream goes on after the resync")
    };
    assert!(later > after.seq);
}

/// The status a stream ended with: its `limit` and `resume_after_seq`.
fn ended_at(status: &Status) -> (String, u64) {
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    let err = stepd_rpc::status::error_of(status);
    assert_eq!(err.reason(), ErrorReason::LimitExceeded, "{status:?}");
    let info = tonic_types::StatusExt::get_details_error_info(status).expect("ErrorInfo");
    (
        info.metadata["limit"].clone(),
        info.metadata["resume_after_seq"].parse().unwrap(),
    )
}

#[tokio::test]
async fn a_subscriber_over_its_bytes_is_ended_where_it_can_resume() {
    let bus = Arc::new(EventBus::new("i".into(), 1, 4096, 64));
    let memory = SubscriberMemory::new(usize::MAX);
    let (mut client, in_tx) = Client::start(Subscriber {
        buffer_bytes: 10_000,
        transport_window: 1,
        ..subscriber(bus.clone(), &memory)
    });
    in_tx.send(watch()).await.unwrap();
    let Payload::Snapshot(snapshot) = client.next().await else {
        panic!("expected a snapshot")
    };
    // Ten 3 KB events: one is handed over, two more fit 10 KB beside
    // it, the next overflows: the stream ends.
    let seqs: Vec<u64> = (0..10).map(|_| note(&bus, 3_000)).collect();
    assert!(seqs[0] > snapshot.seq);
    let mut seen = Vec::new();
    let status = loop {
        match client.next_or_end().await {
            Ok(event) => seen.push(event.seq),
            Err(status) => break status,
        }
    };
    assert!(!seen.is_empty() && seen.len() < 10, "{seen:?}");
    assert_eq!(
        seen,
        seqs[..seen.len()],
        "what was handed over arrives first"
    );
    let (limit, resume) = ended_at(&status);
    assert_eq!(limit, "subscriber_buffer_bytes");
    assert_eq!(
        resume,
        *seen.last().unwrap(),
        "it resumes after what it was sent"
    );
    assert_eq!(memory.held(), 0, "nothing is held for it any more");

    // Resumed, it gets every event after that, exactly once, and goes on.
    let (mut resumed, in_tx) = Client::start(subscriber(bus.clone(), &memory));
    in_tx
        .send(Ok(SubscribeRequest {
            message: Some(Message::Watch(Watch {
                resume_after_seq: resume,
                ..Default::default()
            })),
        }))
        .await
        .unwrap();
    let later = note(&bus, 10);
    for &seq in seqs[seen.len()..].iter().chain([&later]) {
        assert_eq!(resumed.next_event().await.seq, seq);
    }
    drop(in_tx);
}

#[tokio::test]
async fn a_resume_from_far_back_takes_the_rings_as_the_client_reads() {
    let bus = Arc::new(EventBus::new("i".into(), 1, 64, 10_000));
    let memory = SubscriberMemory::new(usize::MAX);
    let from = note(&bus, 10);
    // Far more than the stream may hold: 2 MB of events in the rings.
    let seqs: Vec<u64> = (0..1_000).map(|_| note(&bus, 2_000)).collect();
    let sub = Subscriber {
        buffer_bytes: 100_000,
        transport_window: 10_000,
        ..subscriber(bus.clone(), &memory)
    };
    let stream = sub.memory.clone();
    let (mut client, in_tx) = Client::start(sub);
    in_tx
        .send(Ok(SubscribeRequest {
            message: Some(Message::Watch(Watch {
                resume_after_seq: from,
                ..Default::default()
            })),
        }))
        .await
        .unwrap();
    let first = client.next_event().await;
    assert_eq!(first.seq, seqs[0]);
    // Not reading, it holds a window and a batch, not the rings.
    holds(&stream, |held| held > 0).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(stream.held() < 30_000, "held {}", stream.held());
    let mut seen = vec![first.seq];
    let live = loop {
        let event = client.next_event().await;
        seen.push(event.seq);
        if seen.len() == seqs.len() {
            // Caught up: what is published now comes live.
            break note(&bus, 10);
        }
    };
    assert_eq!(seen, seqs, "every event once, in order");
    assert_eq!(client.next_event().await.seq, live);
    drop(in_tx);
}

#[tokio::test]
async fn over_the_daemons_bound_the_stream_holding_the_most_is_ended() {
    let bus = Arc::new(EventBus::new("i".into(), 1, 4096, 64));
    let memory = SubscriberMemory::new(20_000);
    let reading_sub = subscriber(bus.clone(), &memory);
    let (mut reading, reading_tx) = Client::start(reading_sub);
    let (mut idle, idle_tx) = Client::start(Subscriber {
        transport_window: 1,
        ..subscriber(bus.clone(), &memory)
    });
    for tx in [&reading_tx, &idle_tx] {
        tx.send(watch()).await.unwrap();
    }
    let Payload::Snapshot(_) = reading.next().await else {
        panic!("expected a snapshot")
    };
    let Payload::Snapshot(_) = idle.next().await else {
        panic!("expected a snapshot")
    };
    // Each event is held once for both; the idle stream's queue grows
    // past the daemon's 20 KB long before its own 1 MB.
    let mut seqs = Vec::new();
    for _ in 0..20 {
        seqs.push(note(&bus, 3_000));
        assert_eq!(
            reading.next_event().await.seq,
            *seqs.last().unwrap(),
            "the reader reads on"
        );
    }
    let status = loop {
        match idle.next_or_end().await {
            Ok(_) => {}
            Err(status) => break status,
        }
    };
    let (limit, resume) = ended_at(&status);
    assert_eq!(limit, "subscriber_bytes_total");
    assert_eq!(resume, seqs[0]);
    let later = note(&bus, 10);
    assert_eq!(reading.next_event().await.seq, later);
    drop((reading_tx, idle_tx));
}
