-- Session history: every event of every session, as published (an encoded
-- stepd.v1.Event), kept after the session ended until retention drops it.
CREATE TABLE session_events (
    session_id TEXT    NOT NULL,
    seq        BIGINT NOT NULL,
    channel    BIGINT NOT NULL,
    time_us    BIGINT NOT NULL,
    bytes      BIGINT NOT NULL,
    event      BYTEA   NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX session_events_by_time ON session_events (time_us);
-- What retention dropped of each session's history.
CREATE TABLE history_dropped (
    session_id  TEXT    PRIMARY KEY,
    events      BIGINT NOT NULL,
    through_seq BIGINT NOT NULL,
    reason      TEXT    NOT NULL,
    at_us       BIGINT NOT NULL
);
