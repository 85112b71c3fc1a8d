//! What Subscribe streams that do not read may hold: bounded per stream and
//! for the daemon, each stream past its bound ended with LIMIT_EXCEEDED and
//! the seq to resume after, from which a resume loses nothing; a stream that
//! reads is unaffected, and the daemon's memory stays within the bound.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use prost_types::{Value, value::Kind};
use stepd_e2e::{
    DEADLINE, Daemon, Subscription,
    probe::{Probe, hello},
    reason, rss,
};
use stepd_proto::v1::{
    ObservedReport, PingRequest, Reports, Watch, connect_request::Message as In,
    daemon_service_client::DaemonServiceClient, event::Payload,
};
use tonic::Code;
use tonic_types::StatusExt;

/// Bytes of each event published.
const EVENT_BYTES: usize = 64 * 1024;

/// Samples the daemon's RSS until told to stop; the highest seen.
fn sample_peak(pid: u32) -> (Arc<AtomicBool>, tokio::task::JoinHandle<u64>) {
    let sampling = Arc::new(AtomicBool::new(true));
    let peak = Arc::new(AtomicU64::new(0));
    let handle = tokio::spawn({
        let sampling = sampling.clone();
        async move {
            while sampling.load(Ordering::Relaxed) {
                peak.fetch_max(rss(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            peak.fetch_max(rss(pid), Ordering::Relaxed);
            peak.load(Ordering::Relaxed)
        }
    });
    (sampling, handle)
}

/// A stream whose client never reads: its HTTP/2 windows are the smallest,
/// so the daemon soon holds what it cannot send.
async fn not_reading(daemon: &Daemon) -> Subscription {
    Subscription::open(daemon.small_window_channel().await, Watch::default()).await
}

/// A stream that reads every event as it comes: the seqs of the observed
/// events, and what gaps said was lost.
fn reading(mut sub: Subscription, events: usize) -> tokio::task::JoinHandle<(Vec<u64>, u64)> {
    tokio::spawn(async move {
        let (mut seen, mut lost) = (Vec::new(), 0);
        while seen.len() < events {
            let event = sub.next().await;
            match event.payload {
                Some(Payload::Observed(_)) => seen.push(event.seq),
                Some(Payload::Gap(gap)) => lost += gap.to_seq - gap.from_seq + 1,
                _ => {}
            }
        }
        (seen, lost)
    })
}

/// Publishes `n` events of [`EVENT_BYTES`] through a probe.
async fn publish(probe: &Probe, n: usize) {
    for _ in 0..n {
        probe
            .send(In::Reports(Reports {
                observed: vec![ObservedReport {
                    kind: "k".into(),
                    name: "large".into(),
                    value: Some(Value {
                        kind: Some(Kind::StringValue("v".repeat(EVENT_BYTES - 64))),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }))
            .await;
    }
}

/// Reads a stream that did not read to its end: the observed events it had
/// been sent, then the status. Returns the seqs and the status's `limit`
/// and `resume_after_seq`.
async fn read_to_the_end(sub: &mut Subscription) -> (Vec<u64>, String, u64) {
    let mut seen = Vec::new();
    loop {
        match sub.next_or_error().await {
            Ok(Some(event)) => match event.payload {
                Some(Payload::Observed(_)) => seen.push(event.seq),
                Some(Payload::Gap(gap)) => {
                    panic!("a stream past its bound is ended, not resynchronised: {gap:?}")
                }
                _ => {}
            },
            Ok(None) => panic!("the stream ended with OK after {} events", seen.len()),
            Err(status) => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                assert_eq!(reason(&status), "LIMIT_EXCEEDED", "{status:?}");
                let info = status.get_details_error_info().expect("ErrorInfo");
                let resume = info.metadata["resume_after_seq"]
                    .parse()
                    .expect("resume_after_seq is a seq");
                return (seen, info.metadata["limit"].clone(), resume);
            }
        }
    }
}

/// Resumes after `resume` and reads until `last`: every observed event's
/// seq, and whether a gap came.
async fn resume_until(daemon: &Daemon, resume: u64, last: u64) -> (Vec<u64>, bool) {
    let mut sub = Subscription::open(
        daemon.channel().await,
        Watch {
            resume_after_seq: resume,
            ..Default::default()
        },
    )
    .await;
    let (mut seen, mut gap) = (Vec::new(), false);
    tokio::time::timeout(DEADLINE, async {
        loop {
            let event = sub.next().await;
            match event.payload {
                Some(Payload::Observed(_)) => seen.push(event.seq),
                Some(Payload::Gap(_)) => gap = true,
                Some(Payload::Snapshot(s)) if s.seq >= last => return,
                _ => {}
            }
            if event.seq == last {
                return;
            }
        }
    })
    .await
    .expect("the resumed stream reached the last event");
    (seen, gap)
}

/// Twenty streams that never read while 64 events of 64 KiB are published,
/// each stream allowed 1 MiB: each is ended at its bound, where it can
/// resume from and lose nothing, while a stream that reads gets everything.
/// Before, each such stream was resynchronised instead (a gap and a
/// snapshot it had to read), and every one held its own copy of each event.
#[tokio::test]
async fn streams_that_do_not_read_are_ended_where_they_resume_without_loss() {
    const EVENTS: usize = 64;
    let daemon = Daemon::start(&[
        "--subscriber-buffer-bytes",
        "1048576",
        // The rings hold everything published, so a resume replays exactly.
        "--ring-bytes",
        "67108864",
    ])
    .await;
    let pid = daemon.child.id().unwrap();
    DaemonServiceClient::new(daemon.channel().await)
        .ping(PingRequest {})
        .await
        .unwrap();
    let (probe, _) = Probe::open(&daemon, hello("large"), "").await;
    let idle = rss(pid);

    let mut reader = Subscription::open(daemon.channel().await, Watch::default()).await;
    reader.next().await; // its snapshot
    let reader = reading(reader, EVENTS);
    let mut idle_streams = Vec::new();
    for _ in 0..20 {
        idle_streams.push(not_reading(&daemon).await);
    }
    let (sampling, peak) = sample_peak(pid);
    publish(&probe, EVENTS).await;

    let (published, lost) = tokio::time::timeout(DEADLINE, reader)
        .await
        .expect("the reading stream kept up")
        .unwrap();
    assert_eq!(lost, 0, "the reading stream lost nothing");
    assert_eq!(published.len(), EVENTS);
    let last = *published.last().unwrap();
    sampling.store(false, Ordering::Relaxed);
    let peak = peak.await.unwrap();
    eprintln!("idle {} MiB, peak {} MiB", idle >> 20, peak >> 20);
    // At most the daemon's default bound (64 MiB) over idle, and room for
    // what is not the streams' (the rings' 4 MiB of events, the probe's
    // messages) on a loaded machine; before, each stream held its own
    // copies.
    assert!(
        peak < idle + (64 << 20) + (64 << 20),
        "RSS went from {} MiB to {} MiB",
        idle >> 20,
        peak >> 20
    );

    for (i, sub) in idle_streams.iter_mut().enumerate() {
        let (sent, limit, resume) = read_to_the_end(sub).await;
        assert_eq!(limit, "subscriber_buffer_bytes", "stream {i}");
        assert!(sent.len() < EVENTS, "stream {i} was ended before the end");
        assert_eq!(
            sent,
            published[..sent.len()],
            "stream {i} got what it was sent, in order"
        );
        // Its resume point is the last event it was sent (before any, the
        // seq its snapshot was taken at, below every event).
        match sent.last() {
            Some(&seq) => assert_eq!(resume, seq, "stream {i}"),
            None => assert!(resume < published[0], "stream {i}"),
        }
        if i % 5 == 0 {
            let (resumed, gap) = resume_until(&daemon, resume, last).await;
            assert!(!gap, "the rings hold everything after {resume}");
            assert_eq!(
                resumed,
                published[sent.len()..],
                "stream {i} resumed with every event after {resume}, once"
            );
        }
    }
    drop(probe);
    daemon.stop().await;
}

/// Ten streams that never read under a daemon-wide bound of 2 MiB (each
/// stream may hold 16 MiB): the daemon ends the stream holding the most
/// until what they hold together is back under it, each with the seq to
/// resume after; a stream that reads is not touched.
#[tokio::test]
async fn over_the_daemons_bound_the_streams_holding_the_most_are_ended() {
    const EVENTS: usize = 48;
    let daemon = Daemon::start(&["--subscriber-bytes-total", "2097152"]).await;
    let pid = daemon.child.id().unwrap();
    let (probe, _) = Probe::open(&daemon, hello("large"), "").await;
    let idle = rss(pid);
    let mut reader = Subscription::open(daemon.channel().await, Watch::default()).await;
    reader.next().await;
    let reader = reading(reader, EVENTS);
    let mut idle_streams = Vec::new();
    for _ in 0..10 {
        idle_streams.push(not_reading(&daemon).await);
    }
    let (sampling, peak) = sample_peak(pid);
    publish(&probe, EVENTS).await;
    let (published, lost) = tokio::time::timeout(DEADLINE, reader)
        .await
        .expect("the reading stream kept up")
        .unwrap();
    assert_eq!((published.len(), lost), (EVENTS, 0), "the reader got all");
    sampling.store(false, Ordering::Relaxed);
    let peak = peak.await.unwrap();
    eprintln!("idle {} MiB, peak {} MiB", idle >> 20, peak >> 20);
    assert!(
        peak < idle + (2 << 20) + (64 << 20),
        "RSS went from {} MiB to {} MiB",
        idle >> 20,
        peak >> 20
    );
    for (i, sub) in idle_streams.iter_mut().enumerate() {
        let (sent, limit, resume) = read_to_the_end(sub).await;
        assert_eq!(limit, "subscriber_bytes_total", "stream {i}");
        assert_eq!(sent, published[..sent.len()], "stream {i}");
        if let Some(&seq) = sent.last() {
            assert_eq!(resume, seq, "stream {i}");
        }
    }
    drop(probe);
    daemon.stop().await;
}
