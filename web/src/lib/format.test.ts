import { describe, expect, it } from "vitest";
import {
  formatAgo,
  formatBitRate,
  formatBytes,
  formatCount,
  formatDuration,
  formatNumber,
  formatRatio,
  formatShare,
  formatTime,
} from "./format";

type Format = (v: number | null | undefined) => string;

// Each formatter with the values it is given and what it prints for them.
const CASES: [string, Format, [number, string][]][] = [
  ["formatBytes", formatBytes, [
    [0, "0 B"],
    [1023, "1023 B"],
    [1536, "1.50 KiB"],
    [50 * 1024 * 1024, "50.0 MiB"],
    [3 * 1024 ** 3, "3.00 GiB"],
    [700 * 1024 ** 3, "700 GiB"],
  ]],
  ["formatBitRate (bits, decimal units)", formatBitRate, [
    [12.5e6, "100 Mbit/s"],
    [2.5e6, "20.0 Mbit/s"],
    [125e6, "1.00 Gbit/s"],
    [100, "800 bit/s"],
  ]],
  ["formatShare (a whole percentage)", formatShare, [
    [0.456, "46%"],
    [0, "0%"],
  ]],
  ["formatCount", formatCount, [
    [999, "999"],
    [12345, "12.3k"],
    [2_500_000, "2.50M"],
    [1.5, "1.50"],
  ]],
  ["formatNumber (4 significant digits)", formatNumber, [
    [3.14159, "3.142"],
    [0, "0"],
    [0.0003, "3.000e-4"],
    [65536, "65540"],
    [2e7, "2.000e+7"],
  ]],
  ["formatDuration", formatDuration, [
    [0.25, "250 ms"],
    [3.21, "3.2 s"],
    [245, "4 min 05 s"],
    [7380, "2 h 03 min"],
    [-1, "0 ms"],
  ]],
  ["formatRatio (two significant figures and an x)", formatRatio, [
    [51.2, "51x"],
    [3.2, "3.2x"],
    [1, "1x"],
    [0.5, "0.5x"],
  ]],
];

describe.each(CASES)("%s", (_name, format, cases) => {
  it.each(cases)("%s -> %s", (value, printed) => {
    expect(format(value)).toBe(printed);
  });
});

const FORMATS: [string, Format][] = [
  ...CASES.map(([name, format]): [string, Format] => [name, format]),
  ["formatAgo", (v) => formatAgo(v)],
  ["formatTime", formatTime],
];

describe.each(FORMATS)("%s of a missing value", (_name, format) => {
  it.each([null, undefined, Number.NaN, Number.POSITIVE_INFINITY])("%s is a dash", (value) => {
    expect(format(value)).toBe("—");
  });
});

describe("formatAgo", () => {
  it.each([
    [100, 112, "12 s ago"],
    [100, 100 + 180, "3 min ago"],
    [100, 100 + 7200, "2 h ago"],
    [200, 100, "just now"],
  ])("%s at %s -> %s", (ts, now, printed) => {
    expect(formatAgo(ts, now)).toBe(printed);
  });
});
