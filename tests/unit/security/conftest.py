"""A deployment's security directory in a temporary folder, and its TLS, for the security unit tests."""

import pytest

from computeall.cli.security.deployment import Security
from computeall.cli.security.tls import DeploymentTls
from computeall.protocol.credentials import TlsTrust


@pytest.fixture
def security(tmp_path) -> Security:
    return Security(tmp_path / "security")


@pytest.fixture
def tls(security) -> DeploymentTls:
    return DeploymentTls(security.directory / "tls")


@pytest.fixture
def trust(tls) -> TlsTrust:
    """What a credential carries of the deployment's TLS (made on first use)."""
    return tls.trust()
