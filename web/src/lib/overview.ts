import type { SessionOverview, ValueCount } from "../api/types";
import { formatCount, formatNumber } from "./format";

/** One line of a session's overview: what it is about (also its `data-overview-field`) and what it says. */
export interface OverviewRow {
  field: string;
  text: string;
}

/** "bf16" when every VNode agrees, else "fp32 on 12 VNodes, bf16 on 3 VNodes". */
export function byVNodes(counts: ValueCount[]): string {
  if (counts.length === 1) return counts[0].value;
  return counts.map((c) => `${c.value} on ${c.vnodes} VNode${c.vnodes === 1 ? "" : "s"}`).join(", ");
}

const plural = (n: number, word: string, many = `${word}s`) => `${n} ${n === 1 ? word : many}`;

/** The overview of a session, line by line: the network, data, batch, optimizer, precision, wire,
 * replicas and schedule. `replicasPlaced`: the replicas of its current allocation, if placed. */
export function overviewRows(v: SessionOverview, replicasPlaced: number | null): OverviewRow[] {
  const net = v.network;
  const sync = v.sync === "diloco" ? `DiLoCo, an outer step every ${v.syncInnerSteps} steps` : "gradients summed every step";
  const replicas = v.replicas === "auto" ? `auto (${replicasPlaced ?? "not placed yet"})` : v.replicas;
  const several = (replicasPlaced ?? Number(v.replicas)) > 1 || v.replicas === "auto";
  return [
    { field: "network", text: net
      ? `${net.name}: ${formatCount(net.parameters)} parameters in ${net.vnodes} VNodes, vocabulary ${net.vocabSize}, context ${net.context}`
      : `cannot be read: ${v.networkProblem ?? "unknown"}` },
    { field: "data", text: `${v.data.join(", ")} (trains on ${v.split}, validates on ${v.validationSplit})` },
    { field: "batch", text: `${plural(v.batchSize, "sequence")} per step in ${plural(v.microBatches, "micro-batch", "micro-batches")} of ${v.microBatchSize}` +
      (v.tokensPerStep ? `: ${formatCount(v.tokensPerStep)} tokens per step` : "") },
    { field: "optimizer", text: `AdamW, betas ${v.betas.join(", ")}, weight decay ${formatNumber(v.weightDecay)}` +
      (v.noDecay.length ? ` (not on ${v.noDecay.join(", ")})` : "") +
      `; lr ${formatNumber(v.lrPeak)} after ${plural(v.lrWarmupSteps, "warm-up step")}, cosine to ${formatNumber(v.lrMin)}; ` +
      (v.gradClip > 0 ? `gradient norm clipped at ${formatNumber(v.gradClip)}` : "no clipping") },
    { field: "precision", text: `${net ? `${byVNodes(net.precision)}; ` : ""}loss scaling ${v.lossScaling}` },
    { field: "wire", text: net ? byVNodes(net.wire) : "—" },
    { field: "replicas", text: several ? `${replicas}; ${sync}` : replicas },
    { field: "schedule", text: `${v.steps} steps, ${v.schedule} pipeline schedule, seed ${v.seed}` +
      (v.verifyRate > 0 ? `; ${Math.round(v.verifyRate * 100)}% of results recomputed elsewhere` : "") +
      (v.initFrom ? `; starts from ${v.initFrom}` : "") },
  ];
}
