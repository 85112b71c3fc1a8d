-- The session directory of replicas sharing one database: each replica,
-- the address its peers reach it on and the lease it renews, and the
-- sessions it runs. A replica whose lease ran out has lost its sessions.
CREATE TABLE stepd_replicas (
    id             TEXT   PRIMARY KEY,
    address        TEXT   NOT NULL,
    started_us     BIGINT NOT NULL,
    lease_until_us BIGINT NOT NULL
);
CREATE TABLE stepd_sessions (
    session_id TEXT   PRIMARY KEY,
    replica_id TEXT   NOT NULL,
    started_us BIGINT NOT NULL
);
CREATE INDEX stepd_sessions_by_replica ON stepd_sessions (replica_id);
