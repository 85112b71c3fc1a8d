//! The recorder where it meets a bus it cannot keep up with.

use std::{sync::Arc, time::Duration};

use stepd_proto::v1::{Output, OutputChunk, Session, SessionStarted, SessionState, event::Payload};

use super::{History, Retention};
use stepd_core::events::EventBus;
use stepd_store::Store;

const KEEP: Retention = Retention {
    max_age: Duration::from_secs(3600),
    max_bytes: u64::MAX,
};

/// A store, and a bus whose live buffer holds 4 events and whose rings
/// hold `ring` events per session.
async fn setup(tag: &str, ring: usize) -> (Store, Arc<EventBus>, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("stepd-history-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(&dir).await.unwrap();
    let bus = Arc::new(EventBus::new("test".into(), 1, 4, ring));
    (store, bus, dir)
}

/// Publishes a session's start and `n` outputs without yielding, so the
/// recorder (on this single-threaded runtime) falls behind the buffer.
fn flood(bus: &EventBus, n: usize) {
    bus.publish(
        "s1",
        Payload::SessionStarted(Box::new(SessionStarted {
            session: Some(Session {
                id: "s1".into(),
                state: SessionState::Running.into(),
                ..Default::default()
            }),
        })),
    );
    outputs(bus, n);
}

/// Publishes `n` lines of output of session s1.
fn outputs(bus: &EventBus, n: usize) {
    for i in 0..n {
        bus.publish(
            "s1",
            Payload::Output(Output {
                chunk: Some(OutputChunk {
                    text: format!("line {i}\n"),
                    ..Default::default()
                }),
            }),
        );
    }
}

async fn recorded(history: &History) -> Vec<stepd_proto::v1::Event> {
    history.flush(Duration::from_secs(5)).await;
    history
        .page("s1", &[], 1000, "", usize::MAX)
        .await
        .unwrap()
        .events
}

#[tokio::test]
async fn a_recorder_that_falls_behind_takes_the_rest_from_the_rings() {
    let (store, bus, dir) = setup("replay", 1000).await;
    let history = History::start(bus.clone(), store.clone(), true, KEEP, None);
    flood(&bus, 100);
    let events = recorded(&history).await;
    assert_eq!(events.len(), 101, "every event, none twice");
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.payload, Some(Payload::Gap(_))))
    );
    store.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn what_the_rings_no_longer_hold_is_recorded_as_a_gap() {
    let (store, bus, dir) = setup("gap", 10).await;
    let history = History::start(bus.clone(), store.clone(), true, KEEP, None);
    flood(&bus, 100);
    let events = recorded(&history).await;
    let gap = events
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::Gap(g)) => Some(g.clone()),
            _ => None,
        })
        .expect("the loss is in the history");
    assert!(gap.from_seq <= gap.to_seq);
    // Recording goes on after the gap.
    flood(&bus, 1);
    let after = recorded(&history).await;
    assert_eq!(after.last().map(|e| e.seq), Some(bus.last_seq()));
    assert!(after.windows(2).all(|w| w[0].seq < w[1].seq));
    store.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Bursts that together overflow the live buffer, spread over the time the
/// recorder lets a batch gather: it takes each burst as it comes, so none
/// is lost, although the rings keep too little to fill a gap.
#[tokio::test]
async fn a_recorder_gathering_a_batch_keeps_up_with_bursts() {
    let (store, bus, dir) = setup("bursts", 2).await;
    let history = History::start(bus.clone(), store.clone(), true, KEEP, None);
    flood(&bus, 2);
    for _ in 0..5 {
        // The bursts' spacing is the scenario: the recorder looks at the
        // buffer at least once between two of them, within one gathering.
        tokio::time::sleep(2 * super::recorder::DRAIN).await;
        outputs(&bus, 3);
    }
    let events = recorded(&history).await;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.payload, Some(Payload::Gap(_)))),
        "nothing was lost: {events:?}"
    );
    assert_eq!(events.len(), 18, "every event, none twice");
    store.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A flood gathers for a second before it is written; a flush (the
/// daemon stopping) does not wait for that, it has the batch written now.
#[tokio::test]
async fn a_flush_does_not_wait_for_a_flood_to_gather() {
    let dir = std::env::temp_dir().join(format!("stepd-history-hurry-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(&dir).await.unwrap();
    // A live buffer that holds the whole flood, so the recorder gathers it.
    let bus = Arc::new(EventBus::new("test".into(), 1, 8192, 8192));
    let history = History::start(bus.clone(), store.clone(), true, KEEP, None);
    tokio::task::yield_now().await;
    flood(&bus, super::recorder::FLOOD + 100);
    // Let the recorder take the flood and pass its first 200 ms: from then
    // on it is gathering for a second.
    tokio::time::sleep(super::recorder::LINGER + 2 * super::recorder::DRAIN).await;
    let asked = std::time::Instant::now();
    history.flush(Duration::from_secs(10)).await;
    let took = asked.elapsed();
    let last = bus.last_seq();
    let tail = store.session_events("s1", &[], last - 1, 10).await.unwrap();
    assert_eq!(tail.len(), 1, "the flood's last event is recorded");
    assert!(
        took < (super::recorder::FLOOD_LINGER - super::recorder::LINGER) / 2,
        "the flush waited {took:?}, about as long as the flood would have gathered"
    );
    store.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// While the store cannot keep up, the live buffer keeps no more than
/// `LIVE_LAG_BYTES` for the recorder: past that it lets go of its place,
/// and what the rings do not hold is freed (and later recorded as a gap)
/// instead of waiting in the buffer, whose bound is a count of events of
/// any size.
#[tokio::test]
async fn a_recorder_waiting_for_the_store_does_not_pin_the_live_buffer() {
    use sqlx::Connection as _;

    let dir = std::env::temp_dir().join(format!("stepd-history-pin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(&dir).await.unwrap();
    // The buffer could hold every event; the session's ring keeps 4.
    let bus = Arc::new(EventBus::new("test".into(), 1, 4096, 4));
    let _history = History::start(bus.clone(), store.clone(), true, KEEP, None);
    tokio::task::yield_now().await;
    // Another connection holds the database's write lock: the store's
    // writer waits for it (up to its 5 s busy timeout).
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(dir.join("stepd.db"));
    let mut lock = sqlx::SqliteConnection::connect_with(&options)
        .await
        .unwrap();
    sqlx::query("BEGIN EXCLUSIVE")
        .execute(&mut lock)
        .await
        .unwrap();
    flood(&bus, 0);
    // 48 MiB of events: two batches of 8 MiB fill what may wait for the
    // store, a third waits for them, and the rest waits in the buffer.
    let big = "x".repeat(1 << 20);
    let published: Vec<_> = (0..48)
        .map(|_| {
            bus.publish(
                "s1",
                Payload::Output(Output {
                    chunk: Some(OutputChunk {
                        text: big.clone(),
                        ..Default::default()
                    }),
                }),
            )
        })
        .collect();
    // Past the third batch and before what the ring keeps, only the live
    // buffer holds them.
    let unheld: Vec<_> = published[24..44].iter().map(Arc::downgrade).collect();
    drop(published);
    let deadline = std::time::Instant::now() + Duration::from_millis(2500);
    while unheld.iter().any(|e| e.strong_count() > 0) {
        assert!(
            std::time::Instant::now() < deadline,
            "the live buffer still holds {} MiB of events for the waiting recorder",
            unheld.iter().filter(|e| e.strong_count() > 0).count()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    sqlx::query("ROLLBACK").execute(&mut lock).await.unwrap();
    drop(lock);
    store.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A selector that matches few ended sessions does not make one call read
/// the whole table: a call reads at most `MAX_SCAN` rows and, its page
/// short, says where the next goes on, until the match is found.
#[tokio::test]
async fn listing_ended_sessions_reads_a_bounded_number_of_rows_per_call() {
    use prost::Message as _;

    let (store, bus, dir) = setup("ended-scan", 10).await;
    let history = History::start(bus.clone(), store.clone(), true, KEEP, None);
    let record = |n: usize, app: &str| {
        let id = format!("s-{n:05}");
        let session = Session {
            id: id.clone(),
            state: SessionState::Ended.into(),
            labels: [("app".to_owned(), app.to_owned())].into(),
            ..Default::default()
        };
        stepd_store::SessionRecord {
            session_id: id,
            replica_id: "another".into(),
            started_us: 1,
            ended_us: 2,
            record: session.encode_to_vec(),
        }
    };
    // The one match sorts last: every other row is read before it.
    let records = (0..=super::ended::MAX_SCAN)
        .map(|n| record(n, if n == 0 { "b" } else { "a" }))
        .collect();
    store
        .queue_session_records(records)
        .await
        .done()
        .await
        .unwrap();
    let selector = stepd_core::breakpoints::LabelSelector::parse("app=b").unwrap();
    let mut token = String::new();
    let mut calls = 0;
    let found = loop {
        calls += 1;
        let filter = super::ended::EndedFilter {
            selector: &selector,
            since_us: i64::MIN,
            until_us: i64::MAX,
            page_size: 10,
            page_token: &token,
        };
        let (sessions, next) = history.ended(&filter, usize::MAX).await.unwrap();
        if !sessions.is_empty() {
            assert!(next.is_empty(), "nothing follows the match");
            break sessions;
        }
        assert!(!next.is_empty(), "a short page says where to go on");
        token = next;
        assert!(calls < 10, "no end to the pages");
    };
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].id, "s-00000");
    assert_eq!(calls, 2, "the first call stopped at its bound");
    store.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
