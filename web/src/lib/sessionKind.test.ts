import { describe, expect, it } from "vitest";
import { sessionKind } from "./sessionKind";

describe("sessionKind", () => {
  it("names a verification run by the session it verifies, as the CLI does", () => {
    expect(sessionKind({ verifies: "a1b2c3" })).toBe("verify of a1b2c3");
    expect(sessionKind({ verifies: null })).toBe("training");
  });
});
