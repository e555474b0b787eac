-- What a practitioner charts beside the loss: the gradient norm before clipping and whether the
-- step was clipped (StepCompleted), each PNode's compute time per step (its tokens per second),
-- and the update-to-weight ratio of every VNode group (UpdateRatios). Steps recorded before these
-- fields existed have no grad norm (NULL) and were not clipped.
ALTER TABLE steps ADD COLUMN grad_norm DOUBLE;
ALTER TABLE steps ADD COLUMN clipped BOOLEAN DEFAULT false;

CREATE TABLE IF NOT EXISTS pnode_steps (
    session_id VARCHAR, step BIGINT, pnode VARCHAR, compute_s DOUBLE, tokens BIGINT,
    PRIMARY KEY (session_id, step, pnode)
);

-- `grp`: a VNode group (a block such as b0, or a VNode outside any block)
CREATE TABLE IF NOT EXISTS update_ratios (
    session_id VARCHAR, step BIGINT, grp VARCHAR, ratio DOUBLE, PRIMARY KEY (session_id, step, grp)
);
