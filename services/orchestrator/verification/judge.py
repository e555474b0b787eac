"""Who is wrong when a recomputation disagrees with what the host committed to.

A view of an item is the material a PNode saw (the inputs and output gradients, by digest) and
the results it got. The host's view is its neighbours' ledgers and its own; a checker's is its
report. The math is deterministic, so honest PNodes that saw the same material agree to the bit.

- The checker agrees with the host: passed.
- The checker saw material other than its producers committed to: either the host sent it wrong
  or the checker lies about it, and nobody else saw that copy. A third PNode gets the material
  too: if it sees it wrong as well, the host is wrong; if it sees it right, host and checker
  accuse each other and both are quarantined (so framing a host costs the framer its place).
- The checker saw the right material and computed other results: the third PNode's results
  decide; whoever is in the minority is quarantined, and when all three differ, all of them.
- No third PNode: host and checker are both quarantined.
"""

from __future__ import annotations

from dataclasses import dataclass

from computeall.protocol.verification import CheckReport, ItemDigests


@dataclass(frozen=True)
class Claim:
    """What the ledgers say the item's material and results were."""

    inputs: dict[str, str]
    grads: dict[str, str]
    result: ItemDigests

    def material_ok(self, report: CheckReport) -> bool:
        return report.inputs == self.inputs and report.grads == self.grads

    def agrees(self, report: CheckReport) -> bool:
        return self.material_ok(report) and report.result == self.result


def judge(claim: Claim, host: str, checker: str, report: CheckReport,
          third: str | None = None, third_report: CheckReport | None = None) -> set[str]:
    """The PNodes to quarantine (empty: the check passed)."""
    if claim.agrees(report):
        return set()
    if third is None or third_report is None:
        return {host, checker}
    if not claim.material_ok(report):
        if not claim.material_ok(third_report):
            return {host}
        return {host, checker} if claim.agrees(third_report) else {host, checker, third}
    if not claim.material_ok(third_report):
        return {host, third}
    if third_report.result == claim.result:
        return {checker}
    if third_report.result == report.result:
        return {host}
    return {host, checker, third}
