import { describe, expect, it } from "vitest";
import { formatAgo, formatBitRate, formatBytes, formatCount, formatDuration, formatNumber, formatShare } from "./format";

describe("formatBytes", () => {
  it("uses binary units", () => {
    expect(formatBytes(0)).toBe("0 B");
    expect(formatBytes(1023)).toBe("1023 B");
    expect(formatBytes(1536)).toBe("1.50 KiB");
    expect(formatBytes(50 * 1024 * 1024)).toBe("50.0 MiB");
    expect(formatBytes(3 * 1024 ** 3)).toBe("3.00 GiB");
    expect(formatBytes(700 * 1024 ** 3)).toBe("700 GiB");
  });
  it("prints a dash for missing values", () => {
    expect(formatBytes(null)).toBe("—");
    expect(formatBytes(undefined)).toBe("—");
    expect(formatBytes(Number.NaN)).toBe("—");
  });
});

describe("formatBitRate", () => {
  it("counts bits in decimal units", () => {
    expect(formatBitRate(12.5e6)).toBe("100 Mbit/s");
    expect(formatBitRate(2.5e6)).toBe("20.0 Mbit/s");
    expect(formatBitRate(125e6)).toBe("1.00 Gbit/s");
    expect(formatBitRate(100)).toBe("800 bit/s");
    expect(formatBitRate(null)).toBe("—");
  });
});

describe("formatShare", () => {
  it("rounds to a whole percentage", () => {
    expect(formatShare(0.456)).toBe("46%");
    expect(formatShare(0)).toBe("0%");
    expect(formatShare(undefined)).toBe("—");
  });
});

describe("formatCount", () => {
  it("abbreviates", () => {
    expect(formatCount(999)).toBe("999");
    expect(formatCount(12345)).toBe("12.3k");
    expect(formatCount(2_500_000)).toBe("2.50M");
    expect(formatCount(1.5)).toBe("1.50");
    expect(formatCount(null)).toBe("—");
  });
});

describe("formatNumber", () => {
  it("keeps 4 significant digits", () => {
    expect(formatNumber(3.14159)).toBe("3.142");
    expect(formatNumber(0)).toBe("0");
    expect(formatNumber(0.0003)).toBe("3.000e-4");
    expect(formatNumber(65536)).toBe("65540");
    expect(formatNumber(2e7)).toBe("2.000e+7");
    expect(formatNumber(Number.POSITIVE_INFINITY)).toBe("—");
  });
});

describe("formatDuration", () => {
  it("picks a unit", () => {
    expect(formatDuration(0.25)).toBe("250 ms");
    expect(formatDuration(3.21)).toBe("3.2 s");
    expect(formatDuration(245)).toBe("4 min 05 s");
    expect(formatDuration(7380)).toBe("2 h 03 min");
    expect(formatDuration(-1)).toBe("0 ms");
  });
});

describe("formatAgo", () => {
  it("is relative to now", () => {
    expect(formatAgo(100, 112)).toBe("12 s ago");
    expect(formatAgo(100, 100 + 180)).toBe("3 min ago");
    expect(formatAgo(100, 100 + 7200)).toBe("2 h ago");
    expect(formatAgo(200, 100)).toBe("just now");
    expect(formatAgo(null)).toBe("—");
  });
});
