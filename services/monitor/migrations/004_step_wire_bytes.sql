-- StepCompleted.wire_bytes: the tensor bytes a step sent PNode to PNode, every link together.
ALTER TABLE steps ADD COLUMN IF NOT EXISTS wire_bytes BIGINT DEFAULT 0;
