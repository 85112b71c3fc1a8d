//! The store suite, run against every backend: SQLite, and PostgreSQL on
//! the server `STEPD_TEST_POSTGRES` names (the test command starts one,
//! `scripts/postgres`). Without one the suite fails, saying so: half of it
//! would not have run.

use std::path::PathBuf;

use sqlx::Connection as _;
use stepd_proto::v1::BreakpointSpec;

use super::{Failure, RecordedEvent, Statement, Store, Within, backend::Backend};

/// A fresh, empty database on one backend, which can be opened again.
struct Database {
    url: String,
    dir: PathBuf,
}

impl Database {
    async fn open(&self) -> Store {
        Store::connect(&self.url, &self.dir, "test").await.unwrap()
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One fresh database per backend under test, named after the test.
async fn databases(test: &str) -> Vec<Database> {
    let dir = std::env::temp_dir().join(format!("stepd-store-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut all = vec![Database {
        url: "sqlite:".into(),
        dir: dir.clone(),
    }];
    let server = std::env::var("STEPD_TEST_POSTGRES").expect(
        "STEPD_TEST_POSTGRES names no PostgreSQL server for the store suite's PostgreSQL half: \
         run the tests with scripts/test, or start one with `scripts/postgres start DIR` and \
         export the URL it prints",
    );
    let name = format!("store_{test}_{}", std::process::id());
    let mut admin = sqlx::PgConnection::connect(&server).await.unwrap();
    for sql in [
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}"),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut admin)
            .await
            .unwrap();
    }
    let base = server.rsplit_once('/').map_or(&*server, |(base, _)| base);
    all.push(Database {
        url: format!("{base}/{name}"),
        dir: dir.join("pg"),
    });
    all
}

fn spec(condition: &str) -> BreakpointSpec {
    BreakpointSpec {
        condition: condition.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn breakpoints_round_trip_and_ids_are_never_reused() {
    for db in databases("round_trip").await {
        let store = db.open().await;
        assert_eq!(
            store.schema_version().await.unwrap(),
            super::backend::latest_version(),
            "{}",
            store.place()
        );
        let first = store
            .insert_breakpoint(&spec("a"), 10, "alice")
            .await
            .unwrap();
        let second = store
            .insert_breakpoint(&spec("b"), 11, "bob")
            .await
            .unwrap();
        assert!(second.id > first.id);
        assert_eq!(
            (first.created_by.as_str(), first.updated_by.as_str()),
            ("alice", "alice")
        );

        let changed = store
            .update_breakpoint(first.id, &spec("a2"), 20, "carol", &Within::internal())
            .await
            .unwrap()
            .expect("it exists");
        assert_eq!(changed.spec.condition, "a2");
        assert_eq!((changed.created_at_us, changed.updated_at_us), (10, 20));
        assert_eq!(
            (changed.created_by.as_str(), changed.updated_by.as_str()),
            ("alice", "carol")
        );

        let removed = store
            .delete_breakpoint(second.id, &Within::internal())
            .await
            .unwrap();
        assert_eq!(removed.map(|b| b.spec.condition), Some("b".into()));
        assert!(
            store
                .delete_breakpoint(second.id, &Within::internal())
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            store
                .update_breakpoint(second.id, &spec("x"), 30, "dave", &Within::internal())
                .await
                .unwrap()
                .is_none()
        );
        assert!(store.get_breakpoint(second.id).await.unwrap().is_none());

        let third = store
            .insert_breakpoint(&spec("c"), 40, "erin")
            .await
            .unwrap();
        assert!(
            third.id > second.id,
            "a removed breakpoint's id is not reused"
        );
        store.close().await;

        let reopened = db.open().await;
        let all: Vec<_> = reopened
            .list_breakpoints()
            .await
            .unwrap()
            .into_iter()
            .map(|b| (b.id, b.spec.condition))
            .collect();
        assert_eq!(all, [(first.id, "a2".into()), (third.id, "c".into())]);
        reopened.close().await;
    }
}

#[tokio::test]
async fn hits_add_up_and_skip_breakpoints_that_are_gone() {
    for db in databases("hits").await {
        let store = db.open().await;
        let bp = store.insert_breakpoint(&spec(""), 1, "t").await.unwrap();
        store
            .add_hits(&[(bp.id, 3), (bp.id + 100, 5)])
            .await
            .unwrap();
        store.add_hits(&[(bp.id, 4)]).await.unwrap();
        let stored = store.get_breakpoint(bp.id).await.unwrap().unwrap();
        assert_eq!(stored.hit_count, 7, "{}", store.place());
        assert!(store.get_breakpoint(bp.id + 100).await.unwrap().is_none());
        store.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_made_together_are_each_acknowledged_and_kept() {
    for db in databases("together").await {
        let store = db.open().await;
        let writes: Vec<_> = (0..200)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let spec = spec(&format!("i == {i}"));
                    store.insert_breakpoint(&spec, i, "test").await.unwrap().id
                })
            })
            .collect();
        let mut ids = Vec::new();
        for write in writes {
            ids.push(write.await.unwrap());
        }
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 200, "every write got an id of its own");
        store.close().await;
        let reopened = db.open().await;
        assert_eq!(reopened.list_breakpoints().await.unwrap().len(), 200);
        reopened.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_write_fails_alone_when_it_shares_a_transaction() {
    for db in databases("alone").await {
        let store = db.open().await;
        let writes: Vec<_> = (0..40)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    if i % 10 == 3 {
                        let bad = Statement::new("INSERT INTO no_such_table VALUES ($1)").bind(i);
                        store
                            .write("a bad row", vec![bad], &Within::internal())
                            .await
                            .map(|_| ())
                    } else {
                        store
                            .insert_breakpoint(&spec(""), i, "test")
                            .await
                            .map(|_| ())
                    }
                })
            })
            .collect();
        let mut outcomes = Vec::new();
        for write in writes {
            outcomes.push(write.await.unwrap());
        }
        for (i, outcome) in outcomes.iter().enumerate() {
            assert_eq!(outcome.is_err(), i % 10 == 3, "write {i}: {outcome:?}");
        }
        assert_eq!(store.list_breakpoints().await.unwrap().len(), 36);
        store.close().await;
    }
}

#[tokio::test]
async fn events_are_recorded_in_order_across_inserts_of_every_size() {
    for db in databases("events").await {
        let store = db.open().await;
        let event = |seq: u64| RecordedEvent {
            session_id: "s".into(),
            seq,
            channel: 1,
            time_us: 1_000 + i64::try_from(seq).unwrap(),
            event: seq.to_le_bytes().to_vec(),
        };
        // 150 rows go in as two inserts of 64, one of 16, one of 4 and two of 1 (each
        // backend's spelling); the last is a copy of an earlier event, which keeps the
        // first copy.
        let mut events: Vec<_> = (1..150).map(event).collect();
        let mut copy = event(7);
        copy.event = b"second copy".to_vec();
        events.push(copy);
        store.queue_events(events).await.done().await.unwrap();
        let read = store.session_events("s", &[], 0, 1_000).await.unwrap();
        let expected: Vec<Vec<u8>> = (1..150u64).map(|seq| seq.to_le_bytes().to_vec()).collect();
        assert_eq!(read, expected);
        // A later batch (a recorder taking up from the rings) repeats 50 recorded events
        // in one wide insert beside new ones: the new ones go in, the repeats change nothing.
        let again: Vec<_> = (100..180u64)
            .map(|seq| RecordedEvent {
                event: if seq < 150 {
                    b"again".to_vec()
                } else {
                    seq.to_le_bytes().to_vec()
                },
                ..event(seq)
            })
            .collect();
        store.queue_events(again).await.done().await.unwrap();
        let read = store.session_events("s", &[], 0, 1_000).await.unwrap();
        let expected: Vec<Vec<u8>> = (1..180u64).map(|seq| seq.to_le_bytes().to_vec()).collect();
        assert_eq!(read, expected);
        store.close().await;
    }
}

#[tokio::test]
async fn a_write_to_a_closed_store_fails_and_keeps_nothing() {
    for db in databases("closed").await {
        let store = db.open().await;
        store.close().await;
        let err = store
            .insert_breakpoint(&spec(""), 1, "t")
            .await
            .expect_err("the pool is closed");
        assert_eq!(err.what, "the new breakpoint");
        let reopened = db.open().await;
        assert!(reopened.list_breakpoints().await.unwrap().is_empty());
        reopened.close().await;
    }
}

#[tokio::test]
async fn closing_takes_back_the_connection_the_writer_keeps() {
    for db in databases("close_after_write").await {
        let store = db.open().await;
        // The writer keeps its connection from one write to the next; a
        // close that waited for it would never end.
        let kept = store.insert_breakpoint(&spec(""), 1, "t").await.unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), store.close())
            .await
            .unwrap_or_else(|_| panic!("{}: the close waited for the writer", store.place()));
        store
            .insert_breakpoint(&spec(""), 2, "t")
            .await
            .expect_err("the pool is closed");
        let reopened = db.open().await;
        let listed = reopened.list_breakpoints().await.unwrap();
        assert_eq!(listed.len(), 1, "{}", reopened.place());
        assert_eq!(listed[0].id, kept.id);
        reopened.close().await;
    }
}

#[tokio::test]
async fn a_write_survives_the_server_dropping_the_writers_connection() {
    for db in databases("dropped").await {
        let store = db.open().await;
        // A SQLite connection is a file: nothing drops it.
        if store.backend() != "postgres" {
            store.close().await;
            continue;
        }
        let first = store.insert_breakpoint(&spec("a"), 1, "t").await.unwrap();
        // Every connection of the store's, the one its writer keeps
        // included, as a server restart or a failover would end them.
        let mut admin = sqlx::PgConnection::connect(&db.url).await.unwrap();
        let others = "FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()";
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "SELECT pg_terminate_backend(pid) {others}"
        )))
        .execute(&mut admin)
        .await
        .unwrap();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let (left,): (i64,) =
                sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) {others}")))
                    .fetch_one(&mut admin)
                    .await
                    .unwrap();
            if left == 0 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the connections outlived their end"
            );
            tokio::task::yield_now().await;
        }
        let second = store
            .insert_breakpoint(&spec("b"), 2, "t")
            .await
            .expect("the write goes through a fresh connection");
        let ids: Vec<_> = store
            .list_breakpoints()
            .await
            .unwrap()
            .into_iter()
            .map(|b| b.id)
            .collect();
        assert_eq!(ids, [first.id, second.id]);
        store.close().await;
    }
}

#[tokio::test]
async fn a_write_whose_caller_left_or_whose_time_ran_out_is_never_made() {
    for db in databases("never_made").await {
        let store = db.open().await;
        let gone = Within::of(Some(std::time::Duration::from_secs(10)));
        drop(gone.waiting());
        let late = Within::of(Some(std::time::Duration::ZERO));
        for (within, expected) in [(gone, "caller"), (late, "deadline")] {
            let err = store
                .queue_insert(&spec(""), 1, "t", &within)
                .await
                .done()
                .await
                .expect_err("refused");
            assert!(
                matches!(
                    (&err.source, expected),
                    (Failure::CallerGone, "caller") | (Failure::TooLate, "deadline")
                ),
                "{}: {err}",
                store.place()
            );
        }
        assert!(store.list_breakpoints().await.unwrap().is_empty());
        store.close().await;
    }
}

/// The database's own refusal of a commit begun after the cutoff: a
/// commit that is sent in time but reaches a server that was frozen, or
/// whose packets were held up, until after it.
#[tokio::test]
async fn the_database_refuses_a_commit_that_begins_after_the_cutoff() {
    async fn late_commit<B: Backend>(pool: &sqlx::Pool<B>) -> sqlx::Error {
        let mut conn = pool.acquire().await.unwrap();
        B::execute(&mut conn, B::BEGIN).await.unwrap();
        let begun = tokio::time::Instant::now();
        let statement = Statement::new(
            "INSERT INTO breakpoints (spec, created_at_us, updated_at_us, created_by, updated_by) \
             VALUES ($1, 1, 1, 'late', 'late')",
        )
        .bind(Vec::new());
        B::run::<super::StoredBreakpoint>(&mut conn, statement)
            .await
            .unwrap();
        let cutoff = begun + std::time::Duration::from_millis(50);
        let guard = B::guard(&mut conn).await.unwrap();
        B::commit_before(&mut conn, &guard, cutoff, begun)
            .await
            .unwrap();
        tokio::time::sleep_until(cutoff + std::time::Duration::from_millis(50)).await;
        let err = B::execute(&mut conn, "COMMIT").await.expect_err("too late");
        assert!(B::refused_late(&err), "{err}");
        conn.close().await.unwrap();
        err
    }
    for db in databases("late_commit").await {
        let store = db.open().await;
        let err = match &store.pool {
            super::Pool::Sqlite(pool) => late_commit(pool).await,
            super::Pool::Postgres(pool) => late_commit(pool).await,
        };
        eprintln!("{}: {err}", store.place());
        assert!(store.list_breakpoints().await.unwrap().is_empty());
        // A commit in time still goes through on the same kind of connection.
        store.insert_breakpoint(&spec(""), 1, "t").await.unwrap();
        assert_eq!(store.list_breakpoints().await.unwrap().len(), 1);
        store.close().await;
    }
}

#[test]
fn a_shown_url_has_no_password() {
    use super::without_password as shown;
    assert_eq!(
        shown("postgres://stepd:s3cret@db.internal:5432/stepd"),
        "postgres://stepd@db.internal:5432/stepd"
    );
    assert_eq!(
        shown("postgres://db.internal/stepd?sslmode=require&password=s3cret"),
        "postgres://db.internal/stepd?sslmode=require&password=***"
    );
    assert_eq!(shown("postgres://stepd@h/db"), "postgres://stepd@h/db");
}

#[tokio::test]
async fn retention_drops_a_lost_sessions_record_once_nothing_of_its_history_is_left() {
    use super::{EndedQuery, Replica, SessionRecord};
    for db in databases("lost_records").await {
        let store = db.open().await;
        // "live" runs on a replica in the directory; the others' replica is gone.
        store
            .renew_replica(&Replica {
                id: "here".into(),
                address: "127.0.0.1:1".into(),
                started_us: 1,
                lease_until_us: 5,
            })
            .await
            .unwrap();
        let record = |id: &str, replica: &str, ended_us: i64| SessionRecord {
            session_id: id.into(),
            replica_id: replica.into(),
            started_us: 1_000,
            ended_us,
            record: Vec::new(),
        };
        store
            .queue_session_records(vec![
                record("ended", "gone", 2_000),
                record("lost-long-ago", "gone", 0),
                record("lost-lately", "gone", 0),
                record("live", "here", 0),
            ])
            .await
            .done()
            .await
            .unwrap();
        let event = |session: &str, time_us: i64| RecordedEvent {
            session_id: session.into(),
            seq: u64::try_from(time_us).unwrap(),
            channel: 1,
            time_us,
            event: b"e".to_vec(),
        };
        // What was last known of each: "lost-lately" was heard of after the cut.
        store
            .queue_events(vec![
                event("ended", 1_500),
                event("lost-long-ago", 1_500),
                event("lost-lately", 1_500),
                event("lost-lately", 5_000),
                event("live", 1_500),
            ])
            .await
            .done()
            .await
            .unwrap();
        let listed = |store: &Store| {
            let store = store.clone();
            async move {
                let rows = store
                    .ended_sessions(&EndedQuery {
                        own_id: "reader",
                        since_us: i64::MIN,
                        until_us: i64::MAX,
                        before_id: "",
                        limit: 100,
                    })
                    .await
                    .unwrap();
                rows.into_iter().map(|r| r.session_id).collect::<Vec<_>>()
            }
        };
        assert_eq!(
            listed(&store).await,
            ["lost-long-ago", "lost-lately", "ended"],
            "{}",
            store.backend()
        );

        store
            .drop_history_through(3_000, "test", 9_000)
            .await
            .unwrap();
        assert_eq!(listed(&store).await, ["lost-lately"], "{}", store.backend());
        // The live session's record is kept while its replica is in the
        // directory (its lease may have run out: it is there until found lost).
        store
            .claim_lost_replica("here", 10, Vec::new())
            .await
            .unwrap();
        assert_eq!(
            listed(&store).await,
            ["lost-lately", "live"],
            "{}",
            store.backend()
        );
        store.close().await;
    }
}
