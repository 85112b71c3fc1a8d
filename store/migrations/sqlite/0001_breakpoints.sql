-- Breakpoints are project state. The spec is stored as an encoded
-- stepd.v1.BreakpointSpec so new proto fields need no migration;
-- AUTOINCREMENT guarantees an id is never reused.
CREATE TABLE breakpoints (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    spec          BLOB    NOT NULL,
    hit_count     INTEGER NOT NULL DEFAULT 0,
    created_at_us INTEGER NOT NULL,
    updated_at_us INTEGER NOT NULL
);
