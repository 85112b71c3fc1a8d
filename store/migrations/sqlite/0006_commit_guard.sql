-- PostgreSQL's migration 0006 adds the guard that refuses a commit begun
-- after a write's cutoff. On SQLite the writer's connection refuses it with
-- a commit hook instead, so there is nothing to create; this keeps the two
-- lists of migrations at the same versions.
SELECT 1;
