import { describe, expect, it } from "vitest";
import { countByState, filtered, pageOf } from "./paging";

const pnodes = Array.from({ length: 256 }, (_, i) => ({
  id: `sim-${String(i).padStart(3, "0")}`,
  state: i % 50 === 7 ? "lost" : i === 3 ? "left" : "live",
}));

describe("paging", () => {
  it("cuts pages of a fixed size and clamps the page number", () => {
    const first = pageOf(pnodes, 0, 24);
    expect(first.items.map((p) => p.id).slice(0, 2)).toEqual(["sim-000", "sim-001"]);
    expect([first.items.length, first.pages, first.matching]).toEqual([24, 11, 256]);
    const last = pageOf(pnodes, 99, 24);
    expect([last.page, last.items.length]).toEqual([10, 256 - 240]);
    expect(pageOf([], 3, 24)).toEqual({ items: [], page: 0, pages: 1, matching: 0 });
  });

  it("filters by part of the name and by state", () => {
    expect(filtered(pnodes, { text: "SIM-25", state: null }).map((p) => p.id)).toEqual(
      ["sim-250", "sim-251", "sim-252", "sim-253", "sim-254", "sim-255"]);
    expect(filtered(pnodes, { text: "", state: "lost" }).map((p) => p.id)).toEqual(
      ["sim-007", "sim-057", "sim-107", "sim-157", "sim-207"]);
  });

  it("counts states live first", () => {
    expect(countByState(pnodes)).toEqual([["live", 250], ["lost", 5], ["left", 1]]);
  });
});
