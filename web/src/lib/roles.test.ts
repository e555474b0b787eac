import { describe, expect, it } from "vitest";
import type { PNodeRole } from "../api/types";
import { roleTitle } from "./roles";

const role = (over: Partial<PNodeRole>): PNodeRole => ({
  sessionId: "s", kind: "stage", replica: 0, stage: 0, stages: 2, replicas: 1, vnodes: ["embed"], why: "", ...over,
});

describe("roleTitle", () => {
  it("counts stages from one and names the replica only when there are several", () => {
    expect(roleTitle(role({}))).toBe("stage 1 of 2");
    expect(roleTitle(role({ stage: 1, replica: 3, replicas: 4 }))).toBe("stage 2 of 2, replica 3");
  });
  it("says standby and idle", () => {
    expect(roleTitle(role({ kind: "standby", stage: null, stages: null }))).toBe("standby");
    expect(roleTitle(role({ kind: "idle", stage: null, stages: null }))).toBe("idle: not placed");
  });
});
