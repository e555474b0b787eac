// Human-readable numbers for tables, tooltips and axes. Each returns "—" for a missing value, so
// a view never prints "null" or "NaN".

const DASH = "—";

function missing(v: number | null | undefined): v is null | undefined {
  return v === null || v === undefined || !Number.isFinite(v);
}

/** |v| in the largest of `units` (each `base` times the one before) that keeps it at least 1, and that unit. */
function inUnits(v: number, base: number, units: string[]): [number, string] {
  let x = Math.abs(v);
  let i = 0;
  while (x >= base && i < units.length - 1) {
    x /= base;
    i++;
  }
  return [x, units[i]];
}

/** A scaled value to three significant figures or so: 2.50, 20.0, 700. */
function threeFigures(x: number): string {
  return x.toFixed(x < 10 ? 2 : x < 100 ? 1 : 0);
}

/** 1536 -> "1.5 KiB"; binary units, as memory is counted. */
export function formatBytes(v: number | null | undefined): string {
  if (missing(v)) return DASH;
  const [x, unit] = inUnits(v, 1024, ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]);
  const sign = v < 0 ? "-" : "";
  return `${sign}${unit === "B" ? x.toFixed(0) : threeFigures(x)} ${unit}`;
}

/** Bytes per second as a line rate in bits: 12.5e6 -> "100 Mbit/s"; decimal units, as links are sold. */
export function formatBitRate(bytesPerS: number | null | undefined): string {
  if (missing(bytesPerS)) return DASH;
  const [x, unit] = inUnits(bytesPerS * 8, 1000, ["bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"]);
  return `${threeFigures(x)} ${unit}`;
}

/** A share in [0, 1] as a whole percentage: 0.456 -> "46%". */
export function formatShare(v: number | null | undefined): string {
  return missing(v) ? DASH : `${Math.round(v * 100)}%`;
}

/** 12345 -> "12.3k", 2.5e6 -> "2.50M"; counts such as parameters and tokens/s. */
export function formatCount(v: number | null | undefined): string {
  if (missing(v)) return DASH;
  const [x, unit] = inUnits(v, 1000, ["", "k", "M", "G", "T"]);
  const sign = v < 0 ? "-" : "";
  if (unit === "") return `${sign}${Number.isInteger(x) ? x : x.toFixed(x < 10 ? 2 : 1)}`;
  return `${sign}${threeFigures(x)}${unit}`;
}

/** A loss or lr: 4 significant digits, exponent notation for very small or large values. */
export function formatNumber(v: number | null | undefined, digits = 4): string {
  if (missing(v)) return DASH;
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a < 1e-3 || a >= 1e6) return v.toExponential(digits - 1);
  return Number(v.toPrecision(digits)).toString();
}

/** Seconds as "850 ms", "3.2 s", "4 min 05 s", "2 h 03 min". */
export function formatDuration(seconds: number | null | undefined): string {
  if (missing(seconds)) return DASH;
  const s = Math.max(0, seconds);
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(Math.floor(s % 60)).padStart(2, "0")} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} min`;
}

/** A Unix time (seconds) relative to `now` (seconds): "12 s ago", "3 min ago", else the date. */
export function formatAgo(ts: number | null | undefined, now: number = Date.now() / 1000): string {
  if (missing(ts)) return DASH;
  const age = now - ts;
  if (age < 0) return "just now";
  if (age < 60) return `${Math.floor(age)} s ago`;
  if (age < 3600) return `${Math.floor(age / 60)} min ago`;
  if (age < 86400) return `${Math.floor(age / 3600)} h ago`;
  return formatTime(ts);
}

/** A Unix time (seconds) as local "YYYY-MM-DD HH:MM:SS". */
export function formatTime(ts: number | null | undefined): string {
  if (missing(ts)) return DASH;
  const d = new Date(ts * 1000);
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** How many times smaller: 51.2 -> "51x", 3.2 -> "3.2x", 1 -> "1x" (two significant figures). */
export function formatRatio(v: number | null | undefined): string {
  if (missing(v)) return DASH;
  return `${Number(v.toPrecision(2))}x`;
}
