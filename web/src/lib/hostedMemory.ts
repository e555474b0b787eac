// What each VNode a PNode hosts holds, as the PNode measures it (services/pnode/memory.py): the rows of
// the PNode card's memory table, each with its total and bytes per parameter, and their sum.

import type { HostedVNodeMemory } from "../api/types";

export const MEMORY_KINDS = ["weights", "master", "optimizer", "gradients", "activations"] as const;
export type MemoryKind = (typeof MEMORY_KINDS)[number];

export interface MemoryRow {
  sessionId: string | null; // null on the sum
  vnode: string;
  params: number;
  bytes: Record<MemoryKind, number>;
  total: number;
  /** total over params; null for a VNode with none of its own (a tied LM head) */
  perParam: number | null;
}

function row(sessionId: string | null, vnode: string, params: number, bytes: Record<MemoryKind, number>): MemoryRow {
  const total = MEMORY_KINDS.reduce((sum, k) => sum + bytes[k], 0);
  return { sessionId, vnode, params, bytes, total, perParam: params > 0 ? total / params : null };
}

/** One row per hosted VNode, in the order reported, and the sum of them all (null without rows). */
export function hostedMemory(vnodes: HostedVNodeMemory[]): { rows: MemoryRow[]; sum: MemoryRow | null } {
  const rows = vnodes.map((v) =>
    row(v.sessionId, v.vnode, v.params, Object.fromEntries(MEMORY_KINDS.map((k) => [k, v[k]])) as Record<MemoryKind, number>),
  );
  if (!rows.length) return { rows, sum: null };
  const bytes = Object.fromEntries(MEMORY_KINDS.map((k) => [k, rows.reduce((s, r) => s + r.bytes[k], 0)])) as Record<MemoryKind, number>;
  return { rows, sum: row(null, "all hosted", rows.reduce((s, r) => s + r.params, 0), bytes) };
}
