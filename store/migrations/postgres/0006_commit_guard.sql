-- A write's commit must begin before its cutoff (docs/decisions.md, 136).
-- The writer upserts this connection's row with the latest time its commit
-- may begin, by the server's own clock; the deferred trigger checks it as
-- the commit begins, so a COMMIT held up in transit (a frozen server, a
-- lost packet) that arrives after the writer told its caller the write
-- failed rolls back instead of committing.
CREATE TABLE stepd_commit_guard (
    pid       INTEGER     PRIMARY KEY,
    commit_by TIMESTAMPTZ NOT NULL
);

CREATE FUNCTION stepd_refuse_late_commit() RETURNS trigger AS $$
BEGIN
    IF clock_timestamp() > NEW.commit_by THEN
        RAISE EXCEPTION 'the commit began after the write''s deadline; nothing was kept'
            USING ERRCODE = 'SD001';
    END IF;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;

CREATE CONSTRAINT TRIGGER stepd_refuse_late_commit
    AFTER INSERT OR UPDATE ON stepd_commit_guard
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION stepd_refuse_late_commit();
