// Many PNodes on one page: a filter (by name, by state) and fixed-size pages, so a deployment of
// hundreds renders a page of cards, not hundreds of charts.

export interface Filter {
  text: string; // part of the name, case-insensitive
  state: string | null; // live, lost, left; null: any
}

export interface Page<T> {
  items: T[];
  page: number; // 0-based, clamped to the pages there are
  pages: number;
  matching: number;
}

export function filtered<T extends { id: string; state: string }>(all: T[], filter: Filter): T[] {
  const text = filter.text.trim().toLowerCase();
  return all.filter((p) => (!text || p.id.toLowerCase().includes(text)) && (!filter.state || p.state === filter.state));
}

export function pageOf<T>(items: T[], page: number, size: number): Page<T> {
  const pages = Math.max(1, Math.ceil(items.length / size));
  const clamped = Math.min(Math.max(0, page), pages - 1);
  return { items: items.slice(clamped * size, (clamped + 1) * size), page: clamped, pages, matching: items.length };
}

/** How many PNodes are in each state, in a fixed order (live first). */
export function countByState(all: { state: string }[]): [string, number][] {
  const counts = new Map<string, number>();
  for (const p of all) counts.set(p.state, (counts.get(p.state) ?? 0) + 1);
  const order = ["live", "lost", "left"];
  return [...counts.entries()].sort(([a], [b]) => (order.indexOf(a) + 99) % 99 - (order.indexOf(b) + 99) % 99 || a.localeCompare(b));
}
