import type { SessionSummary } from "../api/types";

/** What a session is, as `computeall session list` says it: "training", or "verify of SID" for a `replay verify` run. */
export function sessionKind(session: Pick<SessionSummary, "verifies">): string {
  return session.verifies ? `verify of ${session.verifies}` : "training";
}
