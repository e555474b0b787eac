-- The monitor's DuckDB tables. Projected tables can be dropped and rebuilt from the log
-- (`computeall replay rebuild`); users and api_keys cannot and are kept by a rebuild.

-- last stream sequence whose rows are committed; written in the same transaction as those rows
CREATE TABLE IF NOT EXISTS positions (stream VARCHAR PRIMARY KEY, seq BIGINT NOT NULL, malformed BIGINT NOT NULL DEFAULT 0);

-- every command and event of CA_LOG, known type or not, with its envelope exactly as recorded
CREATE TABLE IF NOT EXISTS events (
    seq BIGINT PRIMARY KEY, subject VARCHAR, kind VARCHAR, id VARCHAR, type VARCHAR, ts DOUBLE,
    actor VARCHAR, session_id VARCHAR, envelope JSON
);
CREATE INDEX IF NOT EXISTS events_session ON events (session_id);

-- messages that could not be parsed: counted and kept for inspection, never projected
CREATE TABLE IF NOT EXISTS malformed (stream VARCHAR, seq BIGINT, subject VARCHAR, error VARCHAR, data VARCHAR);

CREATE TABLE IF NOT EXISTS sessions (
    id VARCHAR PRIMARY KEY, owner VARCHAR, status VARCHAR, config JSON, created_ts DOUBLE,
    started_ts DOUBLE, ended_ts DOUBLE, step BIGINT, last_loss DOUBLE, tokens BIGINT, tokens_per_s DOUBLE,
    loss_scale DOUBLE, reason VARCHAR, pnodes JSON, bytes_across_per_step BIGINT
);

CREATE TABLE IF NOT EXISTS steps (
    session_id VARCHAR, step BIGINT, ts DOUBLE, loss DOUBLE, tokens BIGINT, step_time_s DOUBLE, lr DOUBLE,
    loss_scale DOUBLE, compute_s DOUBLE, wait_s DOUBLE, PRIMARY KEY (session_id, step)
);

CREATE TABLE IF NOT EXISTS validations (
    session_id VARCHAR, step BIGINT, ts DOUBLE, loss DOUBLE, detail JSON, PRIMARY KEY (session_id, step)
);

CREATE TABLE IF NOT EXISTS checkpoints (
    session_id VARCHAR, step BIGINT, ts DOUBLE, detail JSON, PRIMARY KEY (session_id, step)
);

-- one row per allocation (Allocated, Reallocated): the history of where VNodes lived
CREATE TABLE IF NOT EXISTS allocations (
    session_id VARCHAR, seq BIGINT, ts DOUBLE, type VARCHAR, pnodes JSON, bytes_across_per_step BIGINT,
    PRIMARY KEY (session_id, seq)
);
-- current placement and traffic (replaced by each allocation)
CREATE TABLE IF NOT EXISTS vnodes (
    session_id VARCHAR, vnode VARCHAR, op VARCHAR, pnode VARCHAR, params BIGINT, precision VARCHAR,
    PRIMARY KEY (session_id, vnode)
);
CREATE TABLE IF NOT EXISTS edges (
    session_id VARCHAR, src VARCHAR, dst VARCHAR, bytes_per_step BIGINT, PRIMARY KEY (session_id, src, dst)
);

CREATE TABLE IF NOT EXISTS pnodes (
    id VARCHAR PRIMARY KEY, host VARCHAR, os_pid BIGINT, device VARCHAR, memory_bytes BIGINT, state VARCHAR,
    joined_ts DOUBLE, left_ts DOUBLE, last_heartbeat DOUBLE, rss_bytes BIGINT, gpu_allocated_bytes BIGINT,
    gpu_reserved_bytes BIGINT, bytes_by_category JSON, pending_requests BIGINT, hosted_vnodes JSON, sample_ts DOUBLE
);

-- telemetry: raw rows are recent; older ones are folded into the *_agg tables by retention
CREATE TABLE IF NOT EXISTS memory_samples (
    pnode VARCHAR, ts DOUBLE, rss_bytes BIGINT, gpu_allocated_bytes BIGINT, gpu_reserved_bytes BIGINT,
    bytes_by_category JSON, pending_requests BIGINT
);
CREATE TABLE IF NOT EXISTS memory_samples_agg (
    pnode VARCHAR, bucket_ts DOUBLE, samples BIGINT, rss_avg DOUBLE, rss_max BIGINT, gpu_allocated_max BIGINT,
    gpu_reserved_max BIGINT, pending_avg DOUBLE, pending_max BIGINT
);
CREATE TABLE IF NOT EXISTS requests (
    pnode VARCHAR, session_id VARCHAR, request VARCHAR, step BIGINT, state VARCHAR, ts DOUBLE, duration_s DOUBLE
);
CREATE TABLE IF NOT EXISTS requests_agg (
    pnode VARCHAR, session_id VARCHAR, request VARCHAR, state VARCHAR, bucket_ts DOUBLE, count BIGINT,
    duration_avg DOUBLE, duration_max DOUBLE
);

CREATE TABLE IF NOT EXISTS datasets (name VARCHAR PRIMARY KEY, ts DOUBLE, detail JSON);

CREATE TABLE IF NOT EXISTS users (name VARCHAR PRIMARY KEY, created_ts DOUBLE);
CREATE TABLE IF NOT EXISTS api_keys (
    id VARCHAR PRIMARY KEY, user_name VARCHAR, key_hash VARCHAR UNIQUE, label VARCHAR, created_ts DOUBLE,
    revoked_ts DOUBLE
);
