-- Each hosted VNode's bytes by kind, from a PNode's latest memory sample: a JSON list of
-- `telemetry.VNodeMemory` (session, VNode, params, weights, master, optimizer, gradients, activations).
ALTER TABLE pnodes ADD COLUMN vnode_memory JSON;
