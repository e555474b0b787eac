import { describe, expect, it } from "vitest";
import { formatRatio } from "./format";

describe("formatRatio", () => {
  it("gives two significant figures and an x", () => {
    expect(formatRatio(51.2)).toBe("51x");
    expect(formatRatio(3.2)).toBe("3.2x");
    expect(formatRatio(1)).toBe("1x");
    expect(formatRatio(0.5)).toBe("0.5x");
  });
  it("dashes a missing ratio", () => {
    expect(formatRatio(null)).toBe("—");
    expect(formatRatio(undefined)).toBe("—");
    expect(formatRatio(Number.NaN)).toBe("—");
  });
});
