import { onBeforeUnmount, ref, shallowRef } from "vue";
import { gql } from "../api/client";
import { STEPS, STEPS_LIVE } from "../api/queries";
import { onReconnect, subscribe } from "../api/subscriptions";
import type { Step, StepSeries } from "../api/protocol";
import { appendSteps, emptySeries } from "./steps";

/** Points asked of the server: about one per pixel of a wide chart. */
export const MAX_POINTS = 1000;
/** Live steps appended beyond this many points trigger a fresh downsampled query, so the
 * browser's memory stays bounded however long the session runs. */
const LIVE_LIMIT = 2 * MAX_POINTS;

const FLUSH_MS = 100;

type StepsResult = { session: { steps: StepSeries } | null };

/**
 * A session's step metrics for the charts: the server's downsampled series, then live steps from
 * the subscription. Steps arriving in a burst are applied together, at most ten times a second
 * (a timer, not requestAnimationFrame, which stops in a hidden tab and would let them pile up). While
 * zoomed, the charts show the zoomed range in full detail and live steps only accumulate.
 */
export function useStepSeries(sessionId: string) {
  const live = shallowRef<StepSeries>(emptySeries());
  const zoomed = shallowRef<StepSeries | null>(null);
  const zoom = ref<{ from: number; to: number } | null>(null);
  /** Bumped on every change, since the columns are mutated in place. */
  const version = ref(0);
  const error = ref<string | null>(null);

  let pending: Step[] = [];
  let timer: ReturnType<typeof setTimeout> | undefined;
  let reloading = false;

  async function fetchRange(from: number | null, to: number | null): Promise<StepSeries> {
    const data = await gql<StepsResult>(STEPS, { id: sessionId, from, to, maxPoints: MAX_POINTS });
    return data.session?.steps ?? emptySeries();
  }

  async function reload(): Promise<void> {
    if (reloading) return;
    reloading = true;
    try {
      const series = await fetchRange(null, null);
      // steps that arrived while the query ran are newer than what it returned
      appendSteps(series, pending.filter((s) => s.step > (series.step.at(-1) ?? -1)));
      pending = [];
      live.value = series;
      error.value = null;
      version.value++;
    } catch (e) {
      error.value = e instanceof Error ? e.message : String(e);
    } finally {
      reloading = false;
    }
  }

  function flush(): void {
    timer = undefined;
    if (reloading || !pending.length) return;
    appendSteps(live.value, pending);
    pending = [];
    if (live.value.step.length > LIVE_LIMIT) void reload();
    else version.value++;
  }

  const unsubscribe = subscribe<{ steps: Step }>(
    STEPS_LIVE,
    { id: sessionId },
    ({ steps }) => {
      pending.push(steps);
      timer ??= setTimeout(flush, FLUSH_MS);
    },
    (message) => (error.value = message),
  );
  // steps completed while the monitor was down are only in the database
  const offReconnect = onReconnect(() => void reload());

  async function setZoom(from: number, to: number): Promise<void> {
    zoom.value = { from, to };
    try {
      zoomed.value = await fetchRange(from, to);
      version.value++;
    } catch (e) {
      error.value = e instanceof Error ? e.message : String(e);
    }
  }

  /**
   * Called with the session's steps completed at each poll of its status. A chart still short of
   * the steps the previous poll saw has missed live steps: the first query ran before the
   * subscription was live, or the monitor dropped notices to a slow tab. Those steps are in the database.
   */
  let polledBefore: number | null = null;
  function keepUpWith(completed: number | null): void {
    const charted = (live.value.step.at(-1) ?? -1) + 1;
    if (polledBefore !== null && charted < polledBefore && !pending.length) void reload();
    polledBefore = completed;
  }

  function resetZoom(): void {
    zoom.value = null;
    zoomed.value = null;
    version.value++;
  }

  onBeforeUnmount(() => {
    unsubscribe();
    offReconnect();
    clearTimeout(timer);
  });

  void reload();
  return { live, zoomed, zoom, version, error, setZoom, resetZoom, reload, keepUpWith };
}
