-- On PostgreSQL this version announces breakpoint changes to the other
-- replicas; an SQLite database has one daemon, so there is nothing to do.
-- Kept so that a schema version means the same on both backends.
SELECT 1;
