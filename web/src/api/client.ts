import { ref } from "vue";
import { apiKey } from "./key";

/** The key was refused (HTTP 401): the user has to log in again. */
export class AuthError extends Error {}
/** No answer from the monitor at all (stopped, restarting, network down). */
export class UnreachableError extends Error {}
/** The monitor answered with GraphQL errors (e.g. a session that does not exist). */
export class QueryError extends Error {}

/** Whether the last request reached the monitor; drives the "monitor unreachable" banner. */
export const reachable = ref(true);

export const GRAPHQL_PATH = "graphql";

/** One GraphQL query or mutation over HTTP, with `key` (default: the logged-in key). */
export async function gql<T>(query: string, variables: Record<string, unknown> = {}, key = apiKey.value): Promise<T> {
  let response: Response;
  try {
    response = await fetch(GRAPHQL_PATH, {
      method: "POST",
      headers: { "Content-Type": "application/json", ...(key ? { Authorization: `Bearer ${key}` } : {}) },
      body: JSON.stringify({ query, variables }),
    });
  } catch {
    reachable.value = false;
    throw new UnreachableError("The monitor is unreachable. Is `computeall up` running? Retrying…");
  }
  // a proxy in front of a stopped monitor answers 502/503/504 rather than failing the fetch
  if (response.status >= 502 && response.status <= 504) {
    reachable.value = false;
    throw new UnreachableError(`The monitor is unreachable (HTTP ${response.status}). Retrying…`);
  }
  reachable.value = true;
  const body = await response.json().catch(() => null);
  if (response.status === 401) {
    throw new AuthError(body?.errors?.[0]?.message ?? "The API key was refused.");
  }
  if (body?.errors?.length) throw new QueryError(body.errors.map((e: { message: string }) => e.message).join("; "));
  if (!response.ok || !body?.data) throw new QueryError(`The monitor answered HTTP ${response.status}.`);
  return body.data as T;
}
