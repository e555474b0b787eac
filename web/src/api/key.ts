import { ref } from "vue";

// The API key lives in localStorage so a reload keeps the user logged in; a ref so that the
// router and the views react when it is set or cleared.
const STORAGE_KEY = "computeall.apiKey";

export const apiKey = ref<string | null>(localStorage.getItem(STORAGE_KEY));
/** Why the user was logged out, for the login page to say. */
export const logoutReason = ref<string | null>(null);

export function setApiKey(key: string | null, reason: string | null = null): void {
  if (key) localStorage.setItem(STORAGE_KEY, key);
  else localStorage.removeItem(STORAGE_KEY);
  apiKey.value = key;
  logoutReason.value = reason;
}
