import type uPlot from "uplot";
import type { StepSeries } from "../api/protocol";
import type { NamedSeries } from "../api/types";

/**
 * Lines with a name each (one per PNode, one per VNode group) as uPlot's aligned columns: the
 * union of their steps on x, one column per line, null where a line has no value at a step (a
 * PNode that joined later, a group measured at other steps).
 */
export function alignNamed(lines: NamedSeries[]): uPlot.AlignedData {
  // a line's steps are never null (a NumberList may hold nulls only among the values)
  const steps = [...new Set(lines.flatMap((l) => l.step))].filter((s) => s !== null).sort((a, b) => a - b);
  const index = new Map(steps.map((s, i) => [s, i]));
  const columns = lines.map((l) => {
    const column: (number | null)[] = new Array(steps.length).fill(null);
    l.step.forEach((s, i) => s !== null && (column[index.get(s)!] = l.value[i]));
    return column;
  });
  return [steps, ...columns];
}

/** The grad norm of clipped steps, null elsewhere: drawn as points over the norm's line. */
export function clippedNorms(series: StepSeries): (number | null)[] {
  return series.gradNorm.map((norm, i) => (series.clipped[i] ? norm : null));
}
