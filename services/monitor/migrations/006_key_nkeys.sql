-- An API key also authenticates its user's NATS connections: the public nkey derived from it
-- (computeall.protocol.credentials.api_key_seed) is what the server's configuration lists. Keys made
-- before this have none and log into the dashboard only.
ALTER TABLE api_keys ADD COLUMN nkey VARCHAR;
