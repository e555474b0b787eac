-- What each PNode measured of itself (PNodeJoined, then every heartbeat), and where each PNode's
-- time went in each step (StepTiming telemetry: kept raw for the telemetry window, then dropped).
ALTER TABLE pnodes ADD COLUMN IF NOT EXISTS throughput JSON;
CREATE TABLE IF NOT EXISTS step_timings (
    pnode VARCHAR, session_id VARCHAR, step BIGINT, ts DOUBLE, step_s DOUBLE, compute_s DOUBLE, send_s DOUBLE,
    wait_s DOUBLE, sent_bytes JSON
);
CREATE INDEX IF NOT EXISTS step_timings_pnode ON step_timings (pnode, ts);
