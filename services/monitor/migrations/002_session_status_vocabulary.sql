-- Session status takes the session fold's vocabulary (computeall.protocol.session_state.Status).
-- A session the monitor saw a CreateSession for, accepted or refused, is 'new' until SessionCreated;
-- a refused one keeps the refusal in `reason`.
UPDATE sessions SET status = 'new' WHERE status IN ('requested', 'rejected');
