/** How an event reads on the timeline: good news, a warning, bad news, or neutral (""). */
export type Tone = "good" | "warn" | "bad" | "";

// By the last word of the event's type (SessionFailed, PNodeLost, CheckpointCommitted, ...), so a
// new event type needs no entry anywhere: it reads by its verb, or neutral when that is new too.
const TONE_OF_LAST_WORD: Record<string, Tone> = {
  Failed: "bad", Rejected: "bad", Lost: "bad", Aborted: "bad", Quarantined: "bad",
  Paused: "warn", Reallocated: "warn", Skipped: "warn", Slow: "warn", Back: "warn", Discarded: "warn",
  Committed: "good", Completed: "good",
};

export function lastWord(type: string): string {
  return type.match(/[A-Z][a-z]*$/)?.[0] ?? type;
}

export function eventTone(type: string): Tone {
  return TONE_OF_LAST_WORD[lastWord(type)] ?? "";
}
