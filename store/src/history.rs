//! Session history rows: each event a session published, and what
//! retention dropped of each session.

use super::{
    Queued, Statement, Store, Within, WriteError,
    backend::{Columns, Record},
};

/// One event as recorded.
#[derive(Debug, Clone)]
pub struct RecordedEvent {
    pub session_id: String,
    pub seq: u64,
    /// `stepd.v1.EventChannel` number.
    pub channel: i32,
    pub time_us: i64,
    /// The encoded `stepd.v1.Event`.
    pub event: Vec<u8>,
}

/// What retention dropped of one session's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    pub events: u64,
    pub through_seq: u64,
    pub reason: String,
    pub at_us: i64,
}

/// An event as encoded.
struct Encoded(Vec<u8>);

impl Record for Encoded {
    fn from_row(row: &dyn Columns) -> Result<Self, sqlx::Error> {
        row.blob("event").map(Self)
    }
}

impl Record for Dropped {
    fn from_row(row: &dyn Columns) -> Result<Self, sqlx::Error> {
        Ok(Self {
            events: u64::try_from(row.int("events")?).unwrap_or(0),
            through_seq: u64::try_from(row.int("through_seq")?).unwrap_or(0),
            reason: row.text("reason")?,
            at_us: row.int("at_us")?,
        })
    }
}

/// One number (a count, a sum, a time), read as `n`.
pub(super) struct Number(pub(super) i64);

impl Record for Number {
    fn from_row(row: &dyn Columns) -> Result<Self, sqlx::Error> {
        row.int("n").map(Self)
    }
}

/// An event's time and size, for the size cut.
struct Sized {
    time_us: i64,
    bytes: i64,
}

impl Record for Sized {
    fn from_row(row: &dyn Columns) -> Result<Self, sqlx::Error> {
        Ok(Self {
            time_us: row.int("time_us")?,
            bytes: row.int("bytes")?,
        })
    }
}

/// Records the drop of every event at or before `$1` (time, µs) and drops
/// them, with the records of sessions that ended by then, in one
/// transaction. A record whose end was never written (its replica, gone
/// from the directory, was killed) goes once nothing is left of its
/// session's history and it started by then: its last recorded event is
/// the last that was known of it. (A live session's record on a daemon
/// without a directory may go too; it is written whole again at its next
/// change or its end.)
const DROP_BEFORE: [&str; 4] = [
    "INSERT INTO history_dropped (session_id, events, through_seq, reason, at_us) \
     SELECT session_id, COUNT(*), MAX(seq), $2, $3 FROM session_events \
     WHERE time_us <= $1 GROUP BY session_id \
     ON CONFLICT (session_id) DO UPDATE SET \
       events = history_dropped.events + excluded.events, \
       through_seq = CASE WHEN excluded.through_seq > history_dropped.through_seq \
         THEN excluded.through_seq ELSE history_dropped.through_seq END, \
       reason = excluded.reason, at_us = excluded.at_us",
    "DELETE FROM session_events WHERE time_us <= $1",
    "DELETE FROM session_records WHERE ended_us > 0 AND ended_us <= $1",
    "DELETE FROM session_records WHERE ended_us = 0 AND started_us <= $1 \
     AND replica_id NOT IN (SELECT id FROM stepd_replicas) \
     AND NOT EXISTS (SELECT 1 FROM session_events e WHERE e.session_id = session_records.session_id)",
];

/// How many rows one insert of events takes, largest first: a few sizes,
/// so the drivers' statement caches hold them all.
const ROWS_PER_INSERT: [usize; 4] = [64, 16, 4, 1];

/// How the wide insert of history events is spelt for each backend.
#[derive(Clone, Copy)]
enum Dialect {
    /// Anonymous `?` placeholders and `INSERT OR IGNORE`.
    ///
    /// The driver asks SQLite for each placeholder's name to bind it, and
    /// SQLite finds a numbered one (`$7`) by a linear scan of the
    /// statement's names, so a wide insert with numbered placeholders costs
    /// the square of its width.
    ///
    /// `ON CONFLICT DO NOTHING` leaves the columns' `NOT NULL` able to abort
    /// the statement, so SQLite journals every page a many-row insert
    /// touches in case it must undo just that statement; under a flood of
    /// reports that journal was 40 % of SQLite's work. `OR IGNORE` cannot
    /// abort (no value bound here is ever NULL), so there is no journal.
    Sqlite,
    /// Numbered placeholders (the only ones it reads, looked up directly)
    /// and `ON CONFLICT DO NOTHING`.
    Postgres,
}

/// The insert of `rows` events (one of `ROWS_PER_INSERT`), made once per
/// dialect.
fn insert_events_sql(rows: usize, dialect: Dialect) -> &'static str {
    fn build(dialect: Dialect) -> Vec<String> {
        ROWS_PER_INSERT
            .iter()
            .map(|&rows| {
                let values: Vec<String> = (0..rows)
                    .map(|row| {
                        let row: Vec<String> = (1..=6)
                            .map(|column| match dialect {
                                Dialect::Sqlite => "?".to_owned(),
                                Dialect::Postgres => format!("${}", row * 6 + column),
                            })
                            .collect();
                        format!("({})", row.join(", "))
                    })
                    .collect();
                let (verb, on_conflict) = match dialect {
                    Dialect::Sqlite => ("INSERT OR IGNORE", ""),
                    Dialect::Postgres => ("INSERT", " ON CONFLICT (session_id, seq) DO NOTHING"),
                };
                format!(
                    "{verb} INTO session_events (session_id, seq, channel, time_us, bytes, event) \
                     VALUES {}{on_conflict}",
                    values.join(", ")
                )
            })
            .collect()
    }
    static SQLITE: std::sync::LazyLock<Vec<String>> =
        std::sync::LazyLock::new(|| build(Dialect::Sqlite));
    static POSTGRES: std::sync::LazyLock<Vec<String>> =
        std::sync::LazyLock::new(|| build(Dialect::Postgres));
    let index = ROWS_PER_INSERT
        .iter()
        .position(|&r| r == rows)
        .unwrap_or(ROWS_PER_INSERT.len() - 1);
    match dialect {
        Dialect::Sqlite => &SQLITE[index],
        Dialect::Postgres => &POSTGRES[index],
    }
}

impl Store {
    /// Hands a batch of events to the writer (one transaction); an event
    /// recorded already (the same session and seq) is kept as it was.
    pub async fn queue_events(&self, events: Vec<RecordedEvent>) -> Queued {
        let mut statements = Vec::new();
        let dialect = match self.pool {
            super::Pool::Sqlite(_) => Dialect::Sqlite,
            super::Pool::Postgres(_) => Dialect::Postgres,
        };
        let mut events = events.into_iter().peekable();
        while events.peek().is_some() {
            // Rows go in a few at a time: a statement per row would cost a
            // round trip to the database's worker each, which at tens of
            // thousands of observed reports a second is most of the daemon.
            let rows = ROWS_PER_INSERT
                .into_iter()
                .find(|&rows| events.len() >= rows)
                .unwrap_or(1);
            let mut statement = Statement::new(insert_events_sql(rows, dialect));
            for e in events.by_ref().take(rows) {
                let bytes = i64::try_from(e.event.len()).unwrap_or(i64::MAX);
                statement = statement
                    .bind(e.session_id.as_str())
                    .bind(i64::try_from(e.seq).unwrap_or(i64::MAX))
                    .bind(i64::from(e.channel))
                    .bind(e.time_us)
                    .bind(bytes)
                    .bind(e.event);
                // Yields now and then: see the recorder, whose batches
                // these are.
                tokio::task::consume_budget().await;
            }
            statements.push(statement);
        }
        self.queue("session history", statements, &Within::internal())
            .await
    }

    /// A page of one session's events after `after_seq`, oldest first,
    /// of `channels` (all when empty), encoded.
    pub async fn session_events(
        &self,
        session_id: &str,
        channels: &[i32],
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<Vec<u8>>, sqlx::Error> {
        let after = i64::try_from(after_seq).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // The channel set is a bit mask, so that one statement serves any set.
        let mask: i64 = channels
            .iter()
            .filter(|c| (1..63).contains(*c))
            .fold(0, |mask, c| mask | (1 << c));
        let statement = Statement::new(
            "SELECT event FROM session_events \
             WHERE session_id = $1 AND seq > $2 AND ($3 = 0 OR channel = 0 OR (($3 >> CAST(channel AS INTEGER)) & 1) = 1) \
             ORDER BY seq LIMIT $4",
        )
        .bind(session_id)
        .bind(after)
        .bind(mask)
        .bind(limit);
        let rows: Vec<Encoded> = self.pool.fetch(statement).await?;
        Ok(rows.into_iter().map(|r| r.0).collect())
    }

    /// Whether anything of a session's history is known: an event, or a
    /// record of dropped ones.
    pub async fn has_history(&self, session_id: &str) -> Result<bool, sqlx::Error> {
        let statement = Statement::new(
            "SELECT COUNT(*) AS n FROM (SELECT 1 FROM session_events WHERE session_id = $1 \
             UNION ALL SELECT 1 FROM history_dropped WHERE session_id = $1) AS known",
        )
        .bind(session_id);
        let rows: Vec<Number> = self.pool.fetch(statement).await?;
        Ok(rows.first().is_some_and(|n| n.0 > 0))
    }

    /// What retention dropped of a session's history.
    pub async fn history_dropped(&self, session_id: &str) -> Result<Option<Dropped>, sqlx::Error> {
        let statement = Statement::new(
            "SELECT events, through_seq, reason, at_us FROM history_dropped WHERE session_id = $1",
        )
        .bind(session_id);
        Ok(self.pool.fetch(statement).await?.pop())
    }

    /// Drops (and records the drop of) every event at or before `time_us`.
    pub async fn drop_history_through(
        &self,
        time_us: i64,
        reason: &str,
        now_us: i64,
    ) -> Result<(), WriteError> {
        let [record, delete, ended, lost] = DROP_BEFORE;
        let statements = vec![
            Statement::new(record)
                .bind(time_us)
                .bind(reason)
                .bind(now_us),
            Statement::new(delete).bind(time_us),
            Statement::new(ended).bind(time_us),
            Statement::new(lost).bind(time_us),
        ];
        self.write("the history's retention", statements, &Within::internal())
            .await?;
        Ok(())
    }

    /// The time of the oldest event recorded.
    pub async fn oldest_history(&self) -> Result<Option<i64>, sqlx::Error> {
        let statement =
            Statement::new("SELECT time_us AS n FROM session_events ORDER BY time_us LIMIT 1");
        let rows: Vec<Number> = self.pool.fetch(statement).await?;
        Ok(rows.first().map(|n| n.0))
    }

    /// The bytes of history recorded.
    pub async fn history_bytes(&self) -> Result<u64, sqlx::Error> {
        let statement = Statement::new(
            "SELECT CAST(COALESCE(SUM(bytes), 0) AS BIGINT) AS n FROM session_events",
        );
        let rows: Vec<Number> = self.pool.fetch(statement).await?;
        Ok(rows.first().map_or(0, |n| u64::try_from(n.0).unwrap_or(0)))
    }

    /// The time of the event at which the oldest events add up to `bytes`
    /// (the last event when they never do): dropping through it frees at
    /// least that much, oldest first.
    pub async fn history_cut_for(&self, bytes: u64) -> Result<Option<i64>, sqlx::Error> {
        let mut freed = 0u64;
        let mut after = i64::MIN;
        loop {
            let statement = Statement::new(
                "SELECT time_us, bytes FROM session_events WHERE time_us > $1 \
                 ORDER BY time_us LIMIT 4096",
            )
            .bind(after);
            let rows: Vec<Sized> = self.pool.fetch(statement).await?;
            let Some(last) = rows.last().map(|r| r.time_us) else {
                return Ok((after != i64::MIN).then_some(after));
            };
            for row in &rows {
                freed += u64::try_from(row.bytes).unwrap_or(0);
                if freed >= bytes {
                    return Ok(Some(row.time_us));
                }
            }
            after = last;
        }
    }
}
