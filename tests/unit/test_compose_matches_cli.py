"""docker-compose.yml runs the same services, with the same settings, as `computeall up`, each
with its own credential, under the nats-server configuration `up` generates: one server (profile
`single`) or three clustered (profile `cluster`, as `up --nats-cluster 3`). Docker is not needed:
the file is read as YAML and interpolated with the `.env` as compose does."""

import json
import re
from pathlib import Path

import pytest
import yaml

from computeall.cli.nats_cluster import NatsCluster
from computeall.cli.security.compose import IMAGE, NATS_CONFIG, compose_env, compose_file, identities, variable
from computeall.cli.security.deployment import Security
from computeall.cli.security.server_config import MAX_PAYLOAD
from computeall.cli.supervisor import default_services
from computeall.protocol.credentials import Credential

REPO = Path(__file__).resolve().parents[2]
VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([?-])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def env_of(text: str) -> dict[str, str]:
    return {k: v.strip("'") for k, v in (line.split("=", 1) for line in text.splitlines())}


def interpolate(value, env: dict[str, str]):
    """What docker compose makes of the parsed file's values: in each string `$$` is a `$`, `${VAR}`,
    `${VAR:?why}` and `$VAR` the variable, and `${VAR:-default}` the variable or else the default."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name, modifier, default = m.group(1) or m.group(4), m.group(2), m.group(3)
        if modifier == "-":
            return env.get(name) or default
        assert name in env, f"compose would read ${name}, which the .env does not set"
        return env[name]
    return VARIABLE.sub(one, value)


def blocks(config: str) -> dict:
    """A generated nats-server config (`key: JSON` blocks) as a dict."""
    parts = re.split(r"^([a-z_]+): ", config, flags=re.M)[1:]
    return {key: json.loads(value) for key, value in zip(parts[::2], parts[1::2])}


def profile(compose: dict, name: str) -> list[str]:
    return [service for service, spec in compose["services"].items() if name in spec.get("profiles", [])]


def test_compose_file_is_generated_and_current():
    assert (REPO / "docker-compose.yml").read_text() == compose_file(), "run `python tools/compose_file.py`"


@pytest.mark.parametrize("nats_cluster", [1, 3])
def test_compose_services_match_the_cli(tmp_path, nats_cluster):
    env = env_of(compose_env(Security(tmp_path), nats_cluster))
    compose = interpolate(yaml.safe_load(compose_file()), env)  # every variable of the file is set
    servers = profile(compose, env["COMPOSE_PROFILES"])
    assert servers == (["nats"] if nats_cluster == 1 else ["nats-0", "nats-1", "nats-2"])
    cli = default_services(pnodes=3)
    assert set(compose["services"]) == {s.name for s in cli} | {"nats", "nats-0", "nats-1", "nats-2"}
    for spec in cli:
        service = compose["services"][spec.name]
        command = service["command"]
        assert command[0] == f"computeall.{spec.kind}", spec.name
        # every server's URL (`bus.replicas`: as many stream replicas as servers, at most 3)
        assert command[command.index("--nats") + 1].split(",") == [f"tls://{s}:4222" for s in servers]
        assert "--data-dir" in command and all(arg in command for arg in spec.args if arg != "0")
        assert "profiles" not in service, "in every profile"
    assert {spec["image"] for spec in compose["services"].values()} == {IMAGE}, "the project's image, nats-servers' too"


def test_cluster_profile_runs_the_servers_of_up_nats_cluster_3(tmp_path):
    security = Security(tmp_path / "security")
    env = env_of(compose_env(security, nats_cluster=3))
    compose = yaml.safe_load(compose_file())
    up = NatsCluster(tmp_path, 3, security)  # what `up --nats-cluster 3` would run (not started)
    servers = profile(compose, "cluster")
    for i, name in enumerate(servers):
        ours = blocks(interpolate(compose["services"][name]["environment"][NATS_CONFIG], env))
        theirs = blocks(up.servers[i].config())
        # compose publishes the client port, so it listens with TLS (up's cluster is on localhost only)
        assert ours.keys() == theirs.keys() | {"tls"} and ours["max_payload"] == theirs["max_payload"] == MAX_PAYLOAD
        assert ours["server_name"] == theirs["server_name"] == name
        assert ours["jetstream"].keys() == theirs["jetstream"].keys()
        ours, theirs = ours["cluster"], theirs["cluster"]
        assert ours["name"] == theirs["name"]
        assert ours["authorization"] == theirs["authorization"], "routes authenticate with the deployment's secret"
        # routes to the other two servers, each with the route user and secret
        assert sorted(r.split("@")[1] for r in ours["routes"]) == [f"{n}:6222" for n in servers if n != name]
        assert {r.split("@")[0] for r in ours["routes"]} == {r.split("@")[0] for r in theirs["routes"]}
        assert len(theirs["routes"]) == 2


def test_each_service_has_its_own_credential_and_the_server_knows_each_key():
    compose = yaml.safe_load(compose_file())
    credentials = [s["environment"]["COMPUTEALL_CREDENTIAL"] for s in compose["services"].values() if "profiles" not in s]
    assert len(set(credentials)) == len(credentials) == len(default_services(pnodes=3))
    for config in (s["environment"][NATS_CONFIG] for s in compose["services"].values() if "profiles" in s):  # each server's
        for _, name in identities():
            assert f'"nkey": "${{{variable("NKEY", name)}}}"' in config
        assert f"max_payload: {MAX_PAYLOAD}" in config and "jetstream" in config and "authorization" in config


def test_compose_env_fills_every_variable(tmp_path):
    env = dict(line.split("=", 1) for line in compose_env(Security(tmp_path)).splitlines())
    text = compose_file()
    for key in set(env) - {"COMPOSE_PROFILES"}:  # compose's own setting: the profile it runs
        assert "${" + key in text
    for role, name in identities():
        assert env[variable("NKEY", name)].startswith("U")
    assert compose_env(Security(tmp_path)) == "\n".join(f"{k}={v}" for k, v in env.items()) + "\n", "identities are kept"


@pytest.mark.parametrize("nats_cluster", [1, 3])
def test_compose_env_publishes_on_the_host_ports_it_is_given(tmp_path, nats_cluster):
    """Where 4222 or 8080 is taken on the host: the servers and the monitor are published on the ports
    `compose-env` was given, and the host's CLI dials those."""
    security = Security(tmp_path)
    env = env_of(compose_env(security, nats_cluster, nats_port=14222, monitor_port=18080))
    compose = interpolate(yaml.safe_load(compose_file()), env)
    servers = profile(compose, env["COMPOSE_PROFILES"])
    assert [compose["services"][name]["ports"] for name in servers] == [[f"{14222 + i}:4222"] for i in range(nats_cluster)]
    assert compose["services"]["monitor"]["ports"] == ["18080:8080"]
    for role, name in identities():
        if role in ("user", "admin"):  # the host's identities
            servers = Credential.load(security.credential_path(role, name)).servers
            assert servers == [f"tls://127.0.0.1:{14222 + i}" for i in range(nats_cluster)]


def test_without_ports_in_the_env_the_defaults_are_published(tmp_path):
    older = {k: v for k, v in env_of(compose_env(Security(tmp_path))).items() if not k.startswith("CA_PORT_")}
    compose = interpolate(yaml.safe_load(compose_file()), older)
    assert [compose["services"][name]["ports"] for name in ("nats", "nats-0", "nats-1", "nats-2", "monitor")] == [
        ["4222:4222"], ["4222:4222"], ["4223:4222"], ["4224:4222"], ["8080:8080"]]
