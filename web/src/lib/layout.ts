// How the topology view lays out and labels a network so that it reads at the default zoom.

/** VNode ids in an order where every edge goes forward (ties keep `ids`' order); ids on a cycle last. */
export function topologicalOrder(ids: string[], edges: { src: string; dst: string }[]): string[] {
  const known = new Set(ids);
  const indegree = new Map(ids.map((id) => [id, 0]));
  const out = new Map<string, string[]>();
  for (const e of edges) {
    if (!known.has(e.src) || !known.has(e.dst)) continue;
    indegree.set(e.dst, (indegree.get(e.dst) ?? 0) + 1);
    out.set(e.src, [...(out.get(e.src) ?? []), e.dst]);
  }
  const position = new Map(ids.map((id, i) => [id, i]));
  const ready = ids.filter((id) => indegree.get(id) === 0);
  const order: string[] = [];
  while (ready.length) {
    ready.sort((a, b) => position.get(a)! - position.get(b)!);
    const id = ready.shift()!;
    order.push(id);
    for (const next of out.get(id) ?? []) {
      indegree.set(next, indegree.get(next)! - 1);
      if (indegree.get(next) === 0) ready.push(next);
    }
  }
  return [...order, ...ids.filter((id) => !order.includes(id))];
}

/**
 * Positions for `n` nodes in rows of `cols`, each row running the other way (a snake), so that
 * consecutive nodes (a pipeline's neighbours) are always side by side, a row end included.
 */
export function snakePositions(n: number, cols: number, cellW: number, cellH: number): { x: number; y: number }[] {
  return Array.from({ length: n }, (_, i) => {
    const row = Math.floor(i / cols);
    const along = i % cols;
    return { x: (row % 2 === 0 ? along : cols - 1 - along) * cellW, y: row * cellH };
  });
}

/** A long VNode id shortened in the middle ("block_12.attention_head_3" -> "block_…_head_3"): both ends tell VNodes apart. */
export function shortLabel(id: string, max = 14): string {
  if (id.length <= max) return id;
  const tail = Math.ceil((max - 1) / 2);
  return `${id.slice(0, max - 1 - tail)}…${id.slice(-tail)}`;
}
