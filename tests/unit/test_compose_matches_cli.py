"""docker-compose.yml runs the same services, with the same settings, as `computeall up`, each
with its own credential, under the nats-server configuration `up` generates."""

from pathlib import Path

import yaml

from computeall.cli.security.compose import compose_env, compose_file, identities, variable
from computeall.cli.security.deployment import Security
from computeall.cli.security.server_config import MAX_PAYLOAD
from computeall.cli.supervisor import default_services

REPO = Path(__file__).resolve().parents[2]


def test_compose_file_is_generated_and_current():
    assert (REPO / "docker-compose.yml").read_text() == compose_file(), "run `python tools/compose_file.py`"


def test_compose_services_match_the_cli():
    services = yaml.safe_load(compose_file())["services"]
    cli = default_services(pnodes=3)
    assert set(services) == {s.name for s in cli} | {"nats"}
    for spec in cli:
        command = services[spec.name]["command"]
        assert command[0] == f"computeall.{spec.kind}", spec.name
        assert command[command.index("--nats") + 1] == "nats://nats:4222"
        assert "--data-dir" in command and all(arg in command for arg in spec.args if arg != "0")


def test_each_service_has_its_own_credential_and_the_server_knows_each_key():
    compose = yaml.safe_load(compose_file())
    credentials = [s["environment"]["COMPUTEALL_CREDENTIAL"] for name, s in compose["services"].items() if name != "nats"]
    assert len(set(credentials)) == len(credentials) == len(default_services(pnodes=3))
    config = compose["configs"]["nats_conf"]["content"]
    for _, name in identities():
        assert f'"nkey": "${{{variable("NKEY", name)}}}"' in config
    assert f"max_payload: {MAX_PAYLOAD}" in config and "jetstream" in config and "authorization" in config


def test_compose_env_fills_every_variable(tmp_path):
    env = dict(line.split("=", 1) for line in compose_env(Security(tmp_path)).splitlines())
    text = compose_file()
    for key in env:
        assert "${" + key in text
    for role, name in identities():
        assert env[variable("NKEY", name)].startswith("U")
    assert compose_env(Security(tmp_path)) == "\n".join(f"{k}={v}" for k, v in env.items()) + "\n", "identities are kept"


def test_dockerfile_pins_torch_and_installs_the_project():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "torch==2.13.0" in dockerfile and "pip install --no-cache-dir ." in dockerfile
