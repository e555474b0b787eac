"""The monitor: projects CA_LOG and CA_TEL into DuckDB and serves them over GraphQL."""
