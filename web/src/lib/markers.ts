import type { StepMarker } from "../api/types";

// How each kind of interruption the monitor marks (services/monitor/markers.py) is drawn on the
// step charts: a colour and the word the legend uses. A kind this build does not know is grey.
const STYLE: Record<string, { color: string; label: string }> = {
  resumed: { color: "#2f9e44", label: "resumed" },
  "rolled back": { color: "#e8590c", label: "rolled back to a checkpoint" },
  reallocated: { color: "#7048e8", label: "reallocated" },
  quarantined: { color: "#c92a2a", label: "PNode quarantined" },
  aborted: { color: "#868e96", label: "step aborted" },
};
const UNKNOWN = "#adb5bd";

export function markerColor(kind: string): string {
  return STYLE[kind]?.color ?? UNKNOWN;
}

/** The legend: each kind present, in the order it first happened, with how often. */
export function markerLegend(markers: StepMarker[]): { kind: string; label: string; color: string; count: number }[] {
  const counts = new Map<string, number>();
  for (const m of markers) counts.set(m.kind, (counts.get(m.kind) ?? 0) + 1);
  return [...counts].map(([kind, count]) => ({ kind, label: STYLE[kind]?.label ?? kind, color: markerColor(kind), count }));
}

/** What a mark's tooltip says. */
export function markerTitle(m: StepMarker): string {
  return `step ${m.step}: ${m.text}`;
}
