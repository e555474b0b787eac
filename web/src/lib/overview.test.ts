import { describe, expect, it } from "vitest";
import type { SessionOverview } from "../api/types";
import { byVNodes, overviewRows } from "./overview";

const OVERVIEW: SessionOverview = {
  network: { name: "micro-gpt", vnodes: 15, parameters: 131904, vocabSize: 512, context: 64,
    precision: [{ value: "bf16", vnodes: 15 }], wire: [{ value: "fp32", vnodes: 12 }, { value: "int8", vnodes: 3 }] },
  networkProblem: null, data: ["corpus.txt"], split: "train", validationSplit: "val", steps: 200, batchSize: 8,
  microBatches: 2, microBatchSize: 4, tokensPerStep: 512, seed: 0, lrPeak: 3e-3, lrWarmupSteps: 10, lrMin: 3e-4,
  betas: [0.9, 0.95], weightDecay: 0.1, noDecay: ["bias", "norm"], gradClip: 1, replicas: "2", sync: "gradients",
  syncInnerSteps: null, schedule: "1f1b", lossScaling: "auto", verifyRate: 0, initFrom: null,
};

const text = (rows: { field: string; text: string }[], field: string) => rows.find((r) => r.field === field)?.text;

describe("overviewRows", () => {
  it("says the network, batch, optimizer, precision, wire and replicas in words", () => {
    const rows = overviewRows(OVERVIEW, 2);
    expect(rows.map((r) => r.field)).toEqual(["network", "data", "batch", "optimizer", "precision", "wire", "replicas", "schedule"]);
    expect(text(rows, "network")).toBe("micro-gpt: 132k parameters in 15 VNodes, vocabulary 512, context 64");
    expect(text(rows, "batch")).toBe("8 sequences per step in 2 micro-batches of 4: 512 tokens per step");
    expect(text(rows, "optimizer")).toContain("lr 0.003 after 10 warm-up steps, cosine to 3.000e-4");
    expect(text(rows, "precision")).toBe("bf16; loss scaling auto");
    expect(text(rows, "wire")).toBe("fp32 on 12 VNodes, int8 on 3 VNodes");
    expect(text(rows, "replicas")).toBe("2; gradients summed every step");
  });
  it("names why a network cannot be read, and what auto replicas became", () => {
    const rows = overviewRows({ ...OVERVIEW, network: null, networkProblem: "invalid network: no vnodes", replicas: "auto" }, 4);
    expect(text(rows, "network")).toBe("cannot be read: invalid network: no vnodes");
    expect(text(rows, "replicas")).toBe("auto (4); gradients summed every step");
    expect(text(rows, "wire")).toBe("—");
  });
  it("keeps one replica short", () => {
    expect(text(overviewRows({ ...OVERVIEW, replicas: "1" }, 1), "replicas")).toBe("1");
    expect(byVNodes([{ value: "fp16", vnodes: 1 }])).toBe("fp16");
  });
});
