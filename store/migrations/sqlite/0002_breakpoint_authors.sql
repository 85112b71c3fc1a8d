-- Who added and who last changed each breakpoint: the authenticated
-- identity (docs/security.md). Rows from before are left empty.
ALTER TABLE breakpoints ADD COLUMN created_by TEXT NOT NULL DEFAULT '';
ALTER TABLE breakpoints ADD COLUMN updated_by TEXT NOT NULL DEFAULT '';
