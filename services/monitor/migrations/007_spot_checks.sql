-- Spot checks: per session and PNode whose results were recomputed, how the checks went; and
-- quarantined PNodes (caught computing wrong results: they get no more work).
CREATE TABLE IF NOT EXISTS checks (
    session_id VARCHAR, pnode VARCHAR, passed BIGINT NOT NULL DEFAULT 0, failed BIGINT NOT NULL DEFAULT 0,
    abandoned BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (session_id, pnode)
);
ALTER TABLE pnodes ADD COLUMN IF NOT EXISTS quarantined_ts DOUBLE;
ALTER TABLE pnodes ADD COLUMN IF NOT EXISTS quarantine_reason VARCHAR;
