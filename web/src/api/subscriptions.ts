import { createClient, type Client } from "graphql-ws";
import { apiKey } from "./key";
import { GRAPHQL_PATH } from "./client";

// One websocket for every live view. It retries forever, so the dashboard picks up again after
// the monitor restarts; views refetch what they missed through `onReconnect`.
let client: Client | null = null;
let clientKey: string | null = null;
let everConnected = false;
const reconnectListeners = new Set<() => void>();

function wsUrl(): string {
  const url = new URL(GRAPHQL_PATH, window.location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  return url.toString();
}

function getClient(): Client {
  if (client && clientKey === apiKey.value) return client;
  client?.dispose();
  clientKey = apiKey.value;
  everConnected = false;
  client = createClient({
    url: wsUrl(),
    connectionParams: () => ({ apiKey: apiKey.value }),
    lazy: true,
    retryAttempts: Number.POSITIVE_INFINITY,
    shouldRetry: () => true,
    // capped back-off: a restarted monitor is found again within a few seconds
    retryWait: async (retries) => new Promise((resolve) => setTimeout(resolve, Math.min(5000, 250 * 2 ** retries))),
    on: {
      connected: () => {
        if (everConnected) reconnectListeners.forEach((listener) => listener());
        everConnected = true;
      },
    },
  });
  return client;
}

/** Subscribe to `query`; `next` gets each result's data. Returns the unsubscribe function. */
export function subscribe<T>(
  query: string,
  variables: Record<string, unknown>,
  next: (data: T) => void,
  error: (message: string) => void = () => {},
): () => void {
  return getClient().subscribe<T>(
    { query, variables },
    {
      next: (result) => {
        if (result.errors?.length) error(result.errors.map((e) => e.message).join("; "));
        else if (result.data) next(result.data as T);
      },
      error: (e) => error(e instanceof Error ? e.message : String(e)),
      complete: () => {},
    },
  );
}

/** Call `listener` each time the websocket comes back after a drop; returns the remover. */
export function onReconnect(listener: () => void): () => void {
  reconnectListeners.add(listener);
  return () => reconnectListeners.delete(listener);
}
