/**
 * Exponential moving average of a series, debiased like TensorBoard's smoothing: without the
 * debias the first points would be pulled towards 0 (the EMA's starting value).
 *
 * `weight` in [0, 1): 0 returns the series as is, values near 1 smooth heavily. Non-finite
 * values (a skipped step's NaN/inf loss) are kept as null and do not poison the average.
 */
export function smooth(values: ArrayLike<number | null>, weight: number): (number | null)[] {
  const w = Math.min(Math.max(weight, 0), 0.999);
  const out: (number | null)[] = new Array(values.length);
  let last = 0;
  let count = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === null || !Number.isFinite(v)) {
      out[i] = null;
      continue;
    }
    last = last * w + (1 - w) * v;
    count++;
    out[i] = w === 0 ? v : last / (1 - w ** count);
  }
  return out;
}
