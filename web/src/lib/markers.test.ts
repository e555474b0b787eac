import { describe, expect, it } from "vitest";
import { markerColor, markerLegend, markerTitle } from "./markers";

const mark = (kind: string, step: number) => ({ kind, step, ts: step, type: "T", text: `${kind} at ${step}` });

describe("markers", () => {
  it("lists each kind once, in the order it first happened, with its count", () => {
    const legend = markerLegend([mark("reallocated", 5), mark("rolled back", 5), mark("reallocated", 9)]);
    expect(legend.map((l) => [l.kind, l.count])).toEqual([["reallocated", 2], ["rolled back", 1]]);
    expect(legend[1].label).toBe("rolled back to a checkpoint");
  });
  it("draws a kind it does not know in grey, under its own name", () => {
    expect(markerColor("migrated")).toBe("#adb5bd");
    expect(markerLegend([mark("migrated", 1)])[0].label).toBe("migrated");
    expect(markerColor("resumed")).not.toBe(markerColor("quarantined"));
  });
  it("says the step and what happened in its tooltip", () => {
    expect(markerTitle(mark("resumed", 3))).toBe("step 3: resumed at 3");
  });
});
