"""The PNodes page shows what each hosted VNode holds, by kind, as its PNode measures it: a real PNode
training micro-gpt in bf16 with 8-bit Adam state, in real headless Chromium. Each VNode's row has its
parameters, 2 bytes of weight and 2 of master (the low half) per parameter, its 8-bit moments, and the
tied LM head holds no parameter of its own."""

from __future__ import annotations

import pytest

from computeall.cli.follow import start_session
from computeall.network import Graph, load_network
from computeall.protocol.config import DataConfig, OptimizerConfig, SessionConfig

import declared
from integration.cluster import running_cluster, stdlib_corpus, wait_for_pnodes
from .browser import ARTIFACTS, CHROMIUM_ARGS, REPO, chromium_path, default_key, ensure_dashboard_built, logged_in_page
from .test_dashboard import wait_for_monitor

playwright_api = declared.module("playwright.async_api")

pytestmark = pytest.mark.timeout(240)

NETWORK = (REPO / "examples" / "networks" / "micro-gpt.yaml").read_text()


async def test_each_hosted_vnode_shows_its_bytes_by_kind(tmp_path):
    executable = chromium_path()
    ensure_dashboard_built()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    graph = Graph(load_network(NETWORK))
    config = SessionConfig(network_yaml=NETWORK, data=DataConfig(files=stdlib_corpus()), steps=20_000, batch_size=2,
                           precision="bf16", optimizer=OptimizerConfig(state="int8"))
    async with running_cluster(tmp_path, pnodes=1, with_monitor=True) as (client, supervisor):
        url = await wait_for_monitor(supervisor)
        await wait_for_pnodes(supervisor, ["pnode-0"])
        key = default_key(supervisor)
        await start_session(client, config)
        async with playwright_api.async_playwright() as p:
            browser = await p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
            try:
                page = await logged_in_page(browser, url, key)
                await page.click('[data-nav="pnodes"]')
                table = page.locator('[data-pnode="pnode-0"] [data-table="hosted-memory"]')
                await table.locator('tr[data-vnode="b0.mlp"]').wait_for(timeout=120_000)
                shown = [await r.get_attribute("data-vnode") for r in await table.locator("tbody tr[data-vnode]").all()]
                assert shown == [*graph.order, ""], shown  # every VNode in graph order, then the sum

                async def cells(vid: str) -> tuple[int, dict[str, int]]:
                    row = table.locator(f'tr[data-vnode="{vid}"]')
                    params = int(await row.locator("[data-params]").get_attribute("data-params"))
                    kinds = {k: int(await row.locator(f'[data-kind="{k}"]').get_attribute("data-bytes"))
                             for k in ("weights", "master", "optimizer", "gradients", "activations")}
                    return params, kinds

                for vid in ("embed", "b0.attn", "b0.mlp", "b1.norm2"):
                    params, kinds = await cells(vid)
                    assert params == graph.param_count(vid), vid
                    assert kinds["weights"] == kinds["master"] == 2 * params, (vid, kinds)
                    assert 2 * params < kinds["optimizer"] < 2.1 * params + 16, (vid, kinds)  # codes, a scale a block
                params, kinds = await cells("head")
                assert params == 0 and kinds["weights"] == 0, "the tied head's weight counts under the embedding"
                await page.locator('[data-pnode="pnode-0"]').screenshot(path=str(ARTIFACTS / "pnode-vnode-memory.png"))
            finally:
                await browser.close()
