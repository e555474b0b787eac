import { describe, expect, it } from "vitest";
import { hostedMemory } from "./hostedMemory";

const v = (sessionId: string, vnode: string, params: number, activations = 0) => ({
  sessionId, vnode, params, weights: 2 * params, master: 2 * params, optimizer: 2 * params, gradients: 0, activations,
});

describe("hostedMemory", () => {
  it("totals each VNode's kinds and divides by its parameters", () => {
    const { rows } = hostedMemory([v("s", "b0.mlp", 1000, 4000)]);
    expect(rows[0].total).toBe(10000);
    expect(rows[0].perParam).toBe(10);
    expect(rows[0].bytes).toEqual({ weights: 2000, master: 2000, optimizer: 2000, gradients: 0, activations: 4000 });
  });
  it("a VNode with no parameters of its own has no bytes per parameter", () => {
    expect(hostedMemory([v("s", "head", 0, 512)]).rows[0]).toMatchObject({ total: 512, perParam: null });
  });
  it("sums every row, across sessions", () => {
    const { sum } = hostedMemory([v("s", "embed", 100), v("t", "embed", 300, 800)]);
    expect(sum).toMatchObject({ sessionId: null, params: 400, total: 400 * 6 + 800, perParam: 8 });
    expect(sum?.bytes.activations).toBe(800);
  });
  it("has no sum without rows", () => {
    expect(hostedMemory([])).toEqual({ rows: [], sum: null });
  });
});
