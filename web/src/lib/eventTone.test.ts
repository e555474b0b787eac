import { describe, expect, it } from "vitest";
import { eventTone, lastWord } from "./eventTone";

describe("eventTone", () => {
  it("reads an event by the last word of its type", () => {
    expect(lastWord("CheckpointCommitted")).toBe("Committed");
    expect(lastWord("RolledBack")).toBe("Back");
    expect(eventTone("SessionFailed")).toBe("bad");
    expect(eventTone("CommandRejected")).toBe("bad");
    expect(eventTone("PNodeLost")).toBe("bad");
    expect(eventTone("SessionPaused")).toBe("warn");
    expect(eventTone("Reallocated")).toBe("warn");
    expect(eventTone("ValidationCompleted")).toBe("good");
    expect(eventTone("VerificationFailed")).toBe("bad");
    expect(eventTone("PNodeQuarantined")).toBe("bad");
    expect(eventTone("ResultsDiscarded")).toBe("warn");
  });

  it("gives a type nobody listed the tone of its verb, or none", () => {
    expect(eventTone("ShardFailed")).toBe("bad");
    expect(eventTone("SessionClaimed")).toBe("");
    expect(eventTone("lowercase")).toBe("");
  });
});
