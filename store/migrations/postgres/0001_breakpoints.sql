-- Breakpoints are project state, shared by every replica on this database.
-- The spec is stored as an encoded stepd.v1.BreakpointSpec so new proto
-- fields need no migration; an identity column never reuses an id.
CREATE TABLE breakpoints (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    spec          BYTEA  NOT NULL,
    hit_count     BIGINT NOT NULL DEFAULT 0,
    created_at_us BIGINT NOT NULL,
    updated_at_us BIGINT NOT NULL
);
