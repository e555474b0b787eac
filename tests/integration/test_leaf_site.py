"""A remote site for real: the hub (`computeall up --listen ... --leaf-listen ...`) in the root network
namespace, the site (`computeall up --leaf-file TOKEN_FILE`: its leaf nats-server and two PNodes) in a lab
namespace behind a veth link. A session trains across a hub PNode and the site's two with the
losses of the hub alone, and the site's PNodes are connected to their leaf server, not to the hub."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from .wan import REPO, require_lab

require_lab()

from bench.wanlab import WanLab  # noqa: E402
from bench.wanlab.netns import entered  # noqa: E402
from computeall.cli.nats_server import free_port  # noqa: E402
from computeall.protocol.config import DataConfig, SessionConfig  # noqa: E402

from .cluster import stdlib_corpus  # noqa: E402
from .sessions import spread  # noqa: E402
from .test_two_machines import COMPUTEALL, cli, train  # noqa: E402
from .waiting import wait_until  # noqa: E402

pytestmark = [pytest.mark.timeout(600), pytest.mark.machines]


def config(min_pnodes: int) -> SessionConfig:
    return SessionConfig(network_yaml=(REPO / "examples" / "networks" / "tiny-gpt.yaml").read_text(),
                         data=DataConfig(files=stdlib_corpus()), steps=3, batch_size=2, micro_batches=2, seed=3,
                         checkpoint_every=0, min_pnodes=min_pnodes, pipeline=spread())


def site_monitoring(site_dir: Path, netns: str, endpoint: str) -> dict:
    """The site's leaf server's monitoring endpoint, read inside the site's namespace (it listens on its 127.0.0.1)."""
    services = json.loads((site_dir / "cluster.json").read_text())["services"]
    url = next(s["monitoring"] for s in services if s["kind"] == "nats")
    with entered(netns):
        with urllib.request.urlopen(f"{url}/{endpoint}", timeout=5) as reply:
            return json.loads(reply.read())


def stop(process: subprocess.Popen, sig: int = signal.SIGINT) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_a_leaf_site_trains_with_the_hub(tmp_path):
    hub_dir, site_dir, leaf_port = tmp_path / "hub", tmp_path / "site", free_port()
    with WanLab("lan", nodes=1, cores=[[0, 1]]) as lab:  # before `up`: the hub's certificate names the link's address
        node = lab.nodes[0]
        up = subprocess.Popen([COMPUTEALL, "up", "--listen", f"0.0.0.0:{free_port()}", "--leaf-listen",
                               f"0.0.0.0:{leaf_port}", "--pnodes", "1", "--processes-on-machine", "2", "--data-dir", str(hub_dir)],
                              stdout=open(tmp_path / "up.log", "wb"), stderr=subprocess.STDOUT)
        try:
            wait_until((hub_dir / "cluster.json").exists, 90, "computeall up writing cluster.json", interval=0.2)
            assert f"tls://{node.gateway}:{leaf_port}" in json.loads((hub_dir / "cluster.json").read_text())["public_leaf"]
            alone, placed = asyncio.run(train(hub_dir, config(min_pnodes=1)))
            assert placed == {"pnode-0"}

            made = cli("invite", "leaf", "--name", "site", "--pnodes", "2", "--json", "--data-dir", str(hub_dir))
            assert made.returncode == 0, made.stderr
            token_file = tmp_path / "site.token"  # never on the command line (docs/security.md)
            token_file.write_text(json.loads(made.stdout)["token"])
            site = lab.popen(node, [COMPUTEALL, "up", "--leaf-file", str(token_file), "--data-dir", str(site_dir)],
                             stdout=open(tmp_path / "site.log", "wb"), stderr=subprocess.STDOUT)
            try:
                wait_until((site_dir / "cluster.json").exists, 90, "the site linking to the hub", interval=0.2)
                with_site, placed = asyncio.run(train(hub_dir, config(min_pnodes=3)))
                assert placed == {"pnode-0", "site-0", "site-1"}, "the session ran on the hub and the site"
                assert len(with_site) == len(alone) == 3
                # the hub's PNode and the site's two each have the threads of one of two processes: the same bits
                assert with_site == alone

                connections = [c for c in site_monitoring(site_dir, node.netns, "connz")["connections"]
                               if c["kind"] == "Client"]
                assert {c["name"] for c in connections} == {"pnode-site-0", "pnode-site-1"}
                assert {c["ip"] for c in connections} == {"127.0.0.1"}, "the site's PNodes dial their own leaf server"
                # the session's end changed the site PNodes' grants, and the hub closes leaf links when a leaf
                # user's permissions change (nats-server keeps a live link's old ones): back within seconds
                leafs = wait_until(lambda: site_monitoring(site_dir, node.netns, "leafz")["leafs"], 30,
                                   "the site's leaf link up", interval=0.2)
                assert [(link["ip"], link["port"]) for link in leafs] == [(node.gateway, leaf_port)], \
                    "one link, to the hub: the only connection crossing the WAN"
            finally:
                stop(site)
                assert site.returncode == 0, (tmp_path / "site.log").read_text()[-3000:]
        finally:
            stop(up)
