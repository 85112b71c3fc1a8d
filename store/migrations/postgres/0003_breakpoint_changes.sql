-- Every committed change of a breakpoint is announced on the channel
-- stepd_breakpoints, so that every replica applies it: the operation, the
-- row, the hits it added, and the application_name of the replica that
-- made it (which ignores its own). NOTIFY is delivered on commit, in
-- commit order.
CREATE FUNCTION stepd_breakpoint_changed() RETURNS trigger AS $$
DECLARE
    op    text := TG_OP;
    row   breakpoints;
    delta bigint := 0;
BEGIN
    IF TG_OP = 'DELETE' THEN
        row := OLD;
    ELSE
        row := NEW;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.spec = OLD.spec AND NEW.updated_at_us = OLD.updated_at_us THEN
        op := 'HIT';
        delta := NEW.hit_count - OLD.hit_count;
    END IF;
    PERFORM pg_notify('stepd_breakpoints', json_build_object(
        'op', op,
        'id', row.id,
        'delta', delta,
        'from', current_setting('application_name')
    )::text);
    RETURN NULL;
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER stepd_breakpoint_changed
    AFTER INSERT OR UPDATE OR DELETE ON breakpoints
    FOR EACH ROW EXECUTE FUNCTION stepd_breakpoint_changed();
