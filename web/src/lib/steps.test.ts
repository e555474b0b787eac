import { describe, expect, it } from "vitest";
import { STEP_FIELDS, type Step } from "../api/protocol";
import { appendSteps, emptySeries, tokensPerSecond } from "./steps";

// every metric 0 (new StepCompleted fields included), then the ones these tests look at
const step = (n: number, loss = 1): Step => ({
  ...(Object.fromEntries(STEP_FIELDS.map((f) => [f, 0])) as unknown as Step),
  step: n, ts: n, loss, tokens: 100, stepTimeS: 0.5, lr: 1e-3, lossScale: 1, computeS: 0.4, waitS: 0.1,
  gradNorm: 0.8, clipped: false,
});

describe("appendSteps", () => {
  it("appends columns", () => {
    const s = emptySeries();
    appendSteps(s, [step(0), step(1)]);
    expect(s.step).toEqual([0, 1]);
    expect(s.loss).toEqual([1, 1]);
  });

  it("drops the tail when the session re-runs steps after a rollback", () => {
    const s = emptySeries();
    appendSteps(s, [0, 1, 2, 3].map((n) => step(n, 5)));
    appendSteps(s, [step(2, 7)]);
    expect(s.step).toEqual([0, 1, 2]);
    expect(s.loss).toEqual([5, 5, 7]);
    expect(s.ts.length).toBe(3);
  });
});

describe("tokensPerSecond", () => {
  it("divides tokens by step time, null for a zero time", () => {
    const s = emptySeries();
    appendSteps(s, [step(0), { ...step(1), stepTimeS: 0 }]);
    expect(tokensPerSecond(s)).toEqual([200, null]);
  });
});
