-- Text a session's model wrote while training (SamplesGenerated): one row per step and prompt.
CREATE TABLE IF NOT EXISTS samples (
    session_id VARCHAR, step BIGINT, idx INTEGER, ts DOUBLE, prompt VARCHAR, text VARCHAR, tokens INTEGER,
    PRIMARY KEY (session_id, step, idx)
);
