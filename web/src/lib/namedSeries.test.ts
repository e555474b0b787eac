import { describe, expect, it } from "vitest";
import { alignNamed, clippedNorms } from "./namedSeries";
import { appendSteps, emptySeries } from "./steps";

describe("alignNamed", () => {
  it("puts every line on the union of their steps, null where one has none", () => {
    const data = alignNamed([
      { name: "pnode-0", step: [0, 1, 2], value: [10, 11, 12] },
      { name: "pnode-1", step: [1, 3], value: [21, 23] },
    ]);
    expect(data).toEqual([[0, 1, 2, 3], [10, 11, 12, null], [null, 21, null, 23]]);
  });

  it("is empty without lines", () => {
    expect(alignNamed([])).toEqual([[]]);
  });
});

describe("clippedNorms", () => {
  it("keeps the norm of clipped steps only", () => {
    const s = emptySeries();
    const base = { ts: 0, loss: 1, tokens: 1, stepTimeS: 1, lr: 1, lossScale: 1, computeS: 1, waitS: 0, wireBytes: 0, reduceBytes: 0 };
    appendSteps(s, [
      { ...base, step: 0, gradNorm: 3, clipped: true },
      { ...base, step: 1, gradNorm: 0.5, clipped: false },
      { ...base, step: 2, gradNorm: null, clipped: false },
    ]);
    expect(clippedNorms(s)).toEqual([3, null, null]);
  });
});
