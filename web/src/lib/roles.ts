import type { PNodeRole } from "../api/types";

/** A PNode's role in one session, shortly: "stage 2 of 3, replica 0", "standby", "idle: not placed". */
export function roleTitle(role: PNodeRole): string {
  if (role.kind === "stage") {
    const replica = role.replicas > 1 ? `, replica ${role.replica}` : "";
    return `stage ${(role.stage ?? 0) + 1} of ${role.stages}${replica}`;
  }
  return role.kind === "standby" ? "standby" : "idle: not placed";
}
