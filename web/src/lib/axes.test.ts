import { describe, expect, it } from "vitest";
import { bytesTicks, countTicks, decimalsFor, durationTicks, exponentTicks, numberTicks, shareTicks, unitOf } from "./axes";

const units = (ticks: string[]) => new Set(ticks.map(unitOf));

describe("durationTicks", () => {
  it("writes every tick of an axis in one unit, never 0 ms beside 2.0 s", () => {
    const ticks = durationTicks([0, 0.5, 1, 1.5, 2]);
    expect(ticks).toEqual(["0.0 s", "0.5 s", "1.0 s", "1.5 s", "2.0 s"]);
    expect(units(ticks)).toEqual(new Set(["s"]));
  });
  it("uses milliseconds below a second, minutes and hours for long steps", () => {
    expect(durationTicks([0, 0.02, 0.04])).toEqual(["0 ms", "20 ms", "40 ms"]);
    expect(durationTicks([0, 0.0025, 0.005])).toEqual(["0.0 ms", "2.5 ms", "5.0 ms"]);
    expect(durationTicks([60, 90, 120, 150])).toEqual(["1.0 min", "1.5 min", "2.0 min", "2.5 min"]);
    expect(durationTicks([0, 30, 60, 90])).toEqual(["0 s", "30 s", "60 s", "90 s"]);
    expect(durationTicks([0, 3600, 7200])).toEqual(["0 h", "1 h", "2 h"]);
  });
});

describe("bytesTicks", () => {
  it("keeps one binary unit on the axis", () => {
    const ticks = bytesTicks([0, 512 * 1024, 1024 * 1024, 1.5 * 1024 * 1024]);
    expect(ticks).toEqual(["0.0 MiB", "0.5 MiB", "1.0 MiB", "1.5 MiB"]);
    expect(bytesTicks([0, 200, 400])).toEqual(["0 B", "200 B", "400 B"]);
  });
});

describe("countTicks", () => {
  it("abbreviates every tick with the same suffix", () => {
    expect(countTicks([0, 500, 1000, 1500])).toEqual(["0.0k", "0.5k", "1.0k", "1.5k"]);
    expect(countTicks([0, 1e6, 2e6])).toEqual(["0M", "1M", "2M"]);
    expect(countTicks([0, 20, 40])).toEqual(["0", "20", "40"]);
  });
});

describe("numberTicks", () => {
  it("gives the whole axis the decimals its spacing needs", () => {
    expect(numberTicks([2, 2.5, 3, 3.5])).toEqual(["2.0", "2.5", "3.0", "3.5"]);
    expect(numberTicks([0, 10, 20])).toEqual(["0", "10", "20"]);
    expect(numberTicks([0.001, 0.002, 0.003])).toEqual(["0.001", "0.002", "0.003"]);
  });
  it("switches the whole axis to exponents for tiny or huge values", () => {
    expect(numberTicks([0, 0.0001, 0.0002])).toEqual(["0", "1e-4", "2e-4"]);
    expect(numberTicks([0, 32768, 65536])).toEqual(["0", "32768", "65536"]);
    expect(numberTicks([0, 2e6, 4e6])).toEqual(["0", "2e6", "4e6"]);
  });
});

describe("exponentTicks and shareTicks", () => {
  it("write powers of ten shortly and shares as percentages", () => {
    expect(exponentTicks([1e-4, 1e-3, 2.5e-2])).toEqual(["1e-4", "1e-3", "2.5e-2"]);
    expect(shareTicks([0, 0.25, 0.5])).toEqual(["0%", "25%", "50%"]);
    expect(shareTicks([0, 0.025, 0.05])).toEqual(["0.0%", "2.5%", "5.0%"]);
  });
});

describe("decimalsFor", () => {
  it("counts the decimals that tell ticks apart", () => {
    expect(decimalsFor([0, 0.5, 1])).toBe(1);
    expect(decimalsFor([0, 0.25])).toBe(2);
    expect(decimalsFor([0, 25, 50])).toBe(0);
    expect(decimalsFor([1])).toBe(0);
    expect(decimalsFor([0, 0.0001])).toBe(3); // at most three: an axis that fine writes exponents (numberTicks)
  });
});
