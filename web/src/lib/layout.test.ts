import { describe, expect, it } from "vitest";
import { shortLabel, snakePositions, topologicalOrder } from "./layout";

describe("topologicalOrder", () => {
  it("puts every VNode after its inputs, whatever order they are listed in", () => {
    const ids = ["b0.attn", "b0.res", "embed", "head"]; // as the monitor lists them: by name
    const edges = [
      { src: "embed", dst: "b0.attn" }, { src: "embed", dst: "b0.res" }, { src: "b0.attn", dst: "b0.res" },
      { src: "b0.res", dst: "head" }, { src: "data.tokens", dst: "embed" },
    ];
    expect(topologicalOrder(ids, edges)).toEqual(["embed", "b0.attn", "b0.res", "head"]);
  });
  it("keeps every id, a cycle's at the end", () => {
    expect(topologicalOrder(["a", "b", "c"], [{ src: "b", dst: "c" }, { src: "c", dst: "b" }])).toEqual(["a", "b", "c"]);
  });
});

describe("snakePositions", () => {
  it("keeps consecutive nodes one cell apart, across a row's end too", () => {
    const p = snakePositions(7, 3, 150, 90);
    expect(p.slice(0, 4)).toEqual([{ x: 0, y: 0 }, { x: 150, y: 0 }, { x: 300, y: 0 }, { x: 300, y: 90 }]);
    for (let i = 1; i < p.length; i++) {
      expect(Math.abs(p[i].x - p[i - 1].x) + Math.abs(p[i].y - p[i - 1].y)).toBe(p[i].y === p[i - 1].y ? 150 : 90);
    }
  });
});

describe("shortLabel", () => {
  it("keeps short ids and shortens long ones in the middle", () => {
    expect(shortLabel("b0.attn")).toBe("b0.attn");
    expect(shortLabel("block_12.attention_head_3")).toBe("block_…_head_3");
    expect(shortLabel("block_12.attention_head_3").length).toBe(14);
  });
});
