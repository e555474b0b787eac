-- Data-parallel replicas: every VNode is placed once per replica, and each replica has its own
-- crossing edges; a step records the bytes the replicas sent each other to sum gradients.
ALTER TABLE steps ADD COLUMN reduce_bytes BIGINT DEFAULT 0;
ALTER TABLE sessions ADD COLUMN replicas BIGINT DEFAULT 1;

CREATE TABLE vnodes_by_replica (
    session_id VARCHAR, replica BIGINT, vnode VARCHAR, op VARCHAR, pnode VARCHAR, params BIGINT, precision VARCHAR,
    PRIMARY KEY (session_id, replica, vnode)
);
INSERT INTO vnodes_by_replica SELECT session_id, 0, vnode, op, pnode, params, precision FROM vnodes;
DROP TABLE vnodes;
ALTER TABLE vnodes_by_replica RENAME TO vnodes;

CREATE TABLE edges_by_replica (
    session_id VARCHAR, replica BIGINT, src VARCHAR, dst VARCHAR, bytes_per_step BIGINT,
    PRIMARY KEY (session_id, replica, src, dst)
);
INSERT INTO edges_by_replica SELECT session_id, 0, src, dst, bytes_per_step FROM edges;
DROP TABLE edges;
ALTER TABLE edges_by_replica RENAME TO edges;
