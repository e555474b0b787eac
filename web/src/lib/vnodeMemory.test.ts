import { describe, expect, it } from "vitest";
import { vnodeMemory } from "./vnodeMemory";

describe("vnodeMemory", () => {
  it("fp32 weights are their own master copy", () => {
    expect(vnodeMemory(1000, "fp32")).toEqual({ weights: 4000, master: 0, optimizer: 8000, gradients: 4000 });
  });
  it("low precision keeps an fp32 master", () => {
    expect(vnodeMemory(1000, "bf16")).toEqual({ weights: 2000, master: 4000, optimizer: 8000, gradients: 2000 });
    expect(vnodeMemory(10, "FP16")?.master).toBe(40);
  });
  it("is unknown without params or a known precision", () => {
    expect(vnodeMemory(null, "fp32")).toBeNull();
    expect(vnodeMemory(10, null)).toBeNull();
    expect(vnodeMemory(10, "int4")).toBeNull();
  });
});
