import { onBeforeUnmount, onMounted, ref, shallowRef, type Ref, type ShallowRef } from "vue";
import { AuthError } from "../api/client";
import { setApiKey } from "../api/key";

export interface Poll<T> {
  data: ShallowRef<T | null>;
  error: Ref<string | null>;
  loading: Ref<boolean>;
  refresh: () => Promise<void>;
}

/**
 * Load now and again every `intervalMs` while the view is mounted (0: only on demand). A refused
 * key logs the user out (the login page says why); any other failure keeps the last data and
 * sets `error`, so a monitor restart shows a message and then recovers by itself.
 */
export function usePoll<T>(load: () => Promise<T>, intervalMs: number): Poll<T> {
  const data = shallowRef<T | null>(null);
  const error = ref<string | null>(null);
  const loading = ref(true);
  let timer: ReturnType<typeof setTimeout> | undefined;
  let active = true;
  let issued = 0; // loads started: only the newest one's answer is shown

  async function refresh(): Promise<void> {
    // a slow answer to an older load (a poll begun before the view asked for other data, such as
    // another replica's topology) must not overwrite a newer one's
    const ticket = ++issued;
    try {
      const value = await load();
      if (ticket !== issued) return;
      data.value = value;
      error.value = null;
    } catch (e) {
      if (ticket !== issued) return;
      if (e instanceof AuthError) {
        setApiKey(null, "Your API key was refused (revoked?). Log in with a valid key.");
        return;
      }
      error.value = e instanceof Error ? e.message : String(e);
    } finally {
      loading.value = false;
    }
  }

  async function loop(): Promise<void> {
    await refresh();
    if (active && intervalMs > 0) timer = setTimeout(loop, intervalMs);
  }

  onMounted(loop);
  onBeforeUnmount(() => {
    active = false;
    clearTimeout(timer);
  });
  return { data, error, loading, refresh };
}
