-- Session history: every event of every session, as published (an encoded
-- stepd.v1.Event), kept after the session ended until retention drops it.
CREATE TABLE session_events (
    session_id TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    channel    INTEGER NOT NULL,
    time_us    INTEGER NOT NULL,
    bytes      INTEGER NOT NULL,
    event      BLOB    NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX session_events_by_time ON session_events (time_us);
-- What retention dropped of each session's history.
CREATE TABLE history_dropped (
    session_id  TEXT    PRIMARY KEY,
    events      INTEGER NOT NULL,
    through_seq INTEGER NOT NULL,
    reason      TEXT    NOT NULL,
    at_us       INTEGER NOT NULL
);
