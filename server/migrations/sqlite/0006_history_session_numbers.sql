-- Session history keyed by a number per session instead of its id: the
-- primary key of a thousand sessions' interleaved events compares and
-- stores an integer instead of a 36-character id, which halves what SQLite
-- does for each event recorded. A session's number is kept for as long as
-- the database is (a row of a few dozen bytes).
CREATE TABLE history_sessions (
    session_no INTEGER PRIMARY KEY,
    session_id TEXT    NOT NULL UNIQUE
);
INSERT INTO history_sessions (session_id)
    SELECT DISTINCT session_id FROM session_events ORDER BY session_id;
CREATE TABLE session_events_numbered (
    session_no INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    channel    INTEGER NOT NULL,
    time_us    INTEGER NOT NULL,
    bytes      INTEGER NOT NULL,
    event      BLOB    NOT NULL,
    PRIMARY KEY (session_no, seq)
);
INSERT INTO session_events_numbered (session_no, seq, channel, time_us, bytes, event)
    SELECT h.session_no, e.seq, e.channel, e.time_us, e.bytes, e.event
    FROM session_events e JOIN history_sessions h ON h.session_id = e.session_id;
DROP TABLE session_events;
ALTER TABLE session_events_numbered RENAME TO session_events;
CREATE INDEX session_events_by_time ON session_events (time_us);
