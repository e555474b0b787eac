import { describe, expect, it } from "vitest";
import { smooth } from "./smoothing";

describe("smooth", () => {
  it("returns the series unchanged with weight 0", () => {
    expect(smooth([3, 1, 2], 0)).toEqual([3, 1, 2]);
  });

  it("is debiased: a constant series stays constant from the first point", () => {
    for (const v of smooth([5, 5, 5, 5], 0.9)) expect(v).toBeCloseTo(5, 12);
  });

  it("follows the EMA recurrence", () => {
    const w = 0.6;
    const [a, b] = smooth([1, 3], w);
    expect(a).toBeCloseTo(1, 12);
    // ema1 = 0.4, ema2 = 0.4*0.6 + 0.4*3 = 1.44; debiased by 1 - 0.36
    expect(b).toBeCloseTo(1.44 / 0.64, 12);
  });

  it("skips non-finite values without poisoning later points", () => {
    const out = smooth([2, Number.NaN, null, Number.POSITIVE_INFINITY, 2], 0.5);
    expect(out[1]).toBeNull();
    expect(out[2]).toBeNull();
    expect(out[3]).toBeNull();
    expect(out[4]).toBeCloseTo(2, 12);
  });

  it("clamps the weight so that 1 still moves", () => {
    const out = smooth([0, 10], 1);
    expect(out[1]).toBeGreaterThan(0);
  });

  it("reduces noise", () => {
    const noisy = Array.from({ length: 200 }, (_, i) => 1 + (i % 2 ? 0.5 : -0.5));
    const out = smooth(noisy, 0.95) as number[];
    expect(Math.abs(out[199] - 1)).toBeLessThan(0.05);
  });
});
