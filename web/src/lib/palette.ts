import type { Topology } from "../api/types";

// Distinct colours for PNodes (topology, charts): Tableau 10, readable on white.
const COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

/** The colour of the i-th PNode in a sorted list, so the same PNode keeps its colour across views. */
export function pnodeColor(pnodes: string[], id: string): string {
  const i = [...pnodes].sort().indexOf(id);
  return i < 0 ? "#999" : COLORS[i % COLORS.length];
}

/** Every PNode of a topology, over all its replicas: a PNode keeps its colour whichever replica is shown. */
export function topologyHosts(t: Topology): string[] {
  return [...new Set([...t.replicas.flatMap((r) => r.pnodes), ...t.vnodes.map((v) => v.pnode)])].sort();
}
