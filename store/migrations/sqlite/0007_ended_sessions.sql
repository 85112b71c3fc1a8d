-- Every session's latest record (an encoded stepd.v1.Session, labels
-- masked), written by the replica that runs it as its life changes, so
-- that any replica lists the sessions that ended on every replica
-- (HistoryService.ListEndedSessions). ended_us is 0 while the session is
-- not recorded as ended.
CREATE TABLE session_records (
    session_id TEXT   PRIMARY KEY,
    replica_id TEXT   NOT NULL,
    started_us BIGINT NOT NULL,
    ended_us   BIGINT NOT NULL,
    record     BLOB  NOT NULL
);
CREATE INDEX session_records_by_ended ON session_records (ended_us);
