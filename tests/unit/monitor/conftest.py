import pytest

from computeall.monitor.db import Database


@pytest.fixture
def db(tmp_path):
    """A monitor database in a real DuckDB file (a test file may define its own)."""
    database = Database(tmp_path / "m.duckdb", readers=1)
    yield database
    database.close()
