// The y axes of the charts: what each measures (its label) and its tick values in one unit per
// axis. A tick formatted on its own picks its own unit ("0 ms" beside "2.0 s", "800 KiB" beside
// "1.2 MiB"), so an axis picks the unit from its largest tick and the decimals from the spacing
// between ticks, and writes every tick with both.

/** A chart's y axis: its label says what is measured; its ticks all carry the same unit. */
export interface Axis {
  label: string;
  ticks: (values: number[]) => string[];
}

interface Unit {
  name: string;
  /** how many base units one of it is (a millisecond: 0.001 seconds) */
  size: number;
  /** the biggest tick from which it is used (default: its size) */
  from?: number;
}

/** A unit ladder, smallest first: the last one whose threshold the biggest tick reaches. */
function pick(units: Unit[], values: number[]): Unit {
  const biggest = Math.max(0, ...values.filter(Number.isFinite).map(Math.abs));
  let chosen = units[0];
  for (const u of units) if (biggest >= (u.from ?? u.size)) chosen = u;
  return chosen;
}

/** The fewest decimals (at most 3) that write every tick exactly: ticks 0.25 apart need two, 25 apart none. */
export function decimalsFor(values: number[]): number {
  const finite = values.filter(Number.isFinite);
  for (let digits = 0; digits < 3; digits++) {
    const scale = 10 ** digits;
    if (finite.every((v) => Math.abs(v * scale - Math.round(v * scale)) < 1e-6 * Math.max(1, Math.abs(v * scale)))) {
      return digits;
    }
  }
  return 3;
}

function scaled(values: number[], unit: Unit, separator = " "): string[] {
  const inUnit = values.map((v) => v / unit.size);
  const digits = decimalsFor(inUnit);
  return inUnit.map((v) => (Number.isFinite(v) ? `${v.toFixed(digits)}${unit.name ? separator + unit.name : ""}` : ""));
}

// 90 s reads better than "1.5 min": minutes from two of them, hours from two
const DURATION: Unit[] = [
  { name: "ms", size: 0.001, from: 0 },
  { name: "s", size: 1 },
  { name: "min", size: 60, from: 120 },
  { name: "h", size: 3600, from: 7200 },
];

export function durationTicks(seconds: number[]): string[] {
  return scaled(seconds, pick(DURATION, seconds));
}

const BYTES: Unit[] = ["B", "KiB", "MiB", "GiB", "TiB"].map((name, i) => ({ name, size: 1024 ** i }));

export function bytesTicks(bytes: number[]): string[] {
  return scaled(bytes, pick(BYTES, bytes));
}

const COUNT: Unit[] = ["", "k", "M", "G", "T"].map((name, i) => ({ name, size: 1000 ** i }));

export function countTicks(counts: number[]): string[] {
  return scaled(counts, pick(COUNT, counts), "");
}

/** Plain numbers (a loss, a learning rate): exponent notation for the whole axis when its values are tiny or huge. */
export function numberTicks(values: number[]): string[] {
  const finite = values.filter(Number.isFinite).map(Math.abs);
  const biggest = Math.max(0, ...finite);
  if (biggest >= 1e6 || (biggest > 0 && biggest < 1e-3)) return exponentTicks(values);
  return scaled(values, { name: "", size: 1 });
}

/** Powers of ten and the like, as a log axis has them: "1e-3", "2.5e-4". */
export function exponentTicks(values: number[]): string[] {
  return values.map((v) => {
    if (!Number.isFinite(v)) return "";
    if (v === 0) return "0";
    const [mantissa, exponent] = v.toExponential(1).split("e");
    return `${mantissa.replace(/\.0$/, "")}e${Number(exponent)}`;
  });
}

/** Shares in [0, 1] as percentages. */
export function shareTicks(values: number[]): string[] {
  return scaled(values.map((v) => v * 100), { name: "%", size: 1 }, "");
}

export const durationAxis = (label: string): Axis => ({ label, ticks: durationTicks });
export const bytesAxis = (label: string): Axis => ({ label, ticks: bytesTicks });
export const countAxis = (label: string): Axis => ({ label, ticks: countTicks });
export const numberAxis = (label: string): Axis => ({ label, ticks: numberTicks });
export const logAxis = (label: string): Axis => ({ label, ticks: exponentTicks });
export const shareAxis = (label: string): Axis => ({ label, ticks: shareTicks });

/** The unit a tick is written in: what follows its number ("ms", "KiB", "k", "%", or "" for none). */
export function unitOf(tick: string): string {
  return tick.replace(/^-?[\d.]+(e-?\d+)?\s?/, "");
}
