"""docker-compose.yml runs the same services, with the same settings, as `computeall up`."""

from pathlib import Path

import yaml

from computeall.cli.nats_server import MAX_PAYLOAD
from computeall.cli.supervisor import default_services

REPO = Path(__file__).resolve().parents[2]


def test_compose_services_match_the_cli():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    cli = default_services(pnodes=3)
    kinds = {s.kind for s in cli}
    assert set(services) == kinds | {"nats"}
    for kind in kinds:
        command = services[kind]["command"]
        assert command[0] == f"computeall.{kind}", kind
        assert command[command.index("--nats") + 1] == "nats://nats:4222"
        assert "--data-dir" in command
    assert services["pnode"]["deploy"]["replicas"] == sum(s.kind == "pnode" for s in cli)
    pnode_args = next(s for s in cli if s.kind == "pnode").args
    compose_pnode = services["pnode"]["command"]
    assert compose_pnode[compose_pnode.index("--processes-on-machine") + 1] == pnode_args[pnode_args.index("--processes-on-machine") + 1]


def test_compose_nats_has_jetstream_and_the_same_max_payload():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert "-js" in compose["services"]["nats"]["command"]
    assert f"max_payload: {MAX_PAYLOAD}" in compose["configs"]["nats_conf"]["content"]


def test_dockerfile_pins_torch_and_installs_the_project():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "torch==2.13.0" in dockerfile and "pip install --no-cache-dir ." in dockerfile
