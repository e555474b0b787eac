import { STEP_FIELDS, type Step, type StepSeries } from "../api/protocol";

export function emptySeries(): StepSeries {
  return Object.fromEntries(STEP_FIELDS.map((f) => [f, []])) as unknown as StepSeries;
}

/**
 * Append live steps to a series in place. A step number at or below the last one means the
 * session rolled back to a checkpoint (failover) and is running those steps again: the old
 * tail is dropped so the chart shows the run as it now stands.
 */
export function appendSteps(series: StepSeries, steps: Step[]): void {
  for (const s of steps) {
    const n = series.step.length;
    if (n && s.step <= series.step[n - 1]) {
      let keep = n;
      while (keep > 0 && series.step[keep - 1] >= s.step) keep--;
      for (const f of STEP_FIELDS) series[f].length = keep;
    }
    for (const f of STEP_FIELDS) (series[f] as Step[typeof f][]).push(s[f]);
  }
}

/** Tokens per second of each step (the server stores tokens and step time). */
export function tokensPerSecond(series: StepSeries): (number | null)[] {
  return series.tokens.map((t, i) => (series.stepTimeS[i] > 0 ? t / series.stepTimeS[i] : null));
}
