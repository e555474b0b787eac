/// <reference types="vitest/config" />
import { defineConfig } from "vite";
import vue from "@vitejs/plugin-vue";

// During `npm run dev`, /graphql goes to a running monitor (MONITOR_URL, e.g. http://127.0.0.1:8470).
const monitor = process.env.MONITOR_URL ?? "http://127.0.0.1:8470";

export default defineConfig({
  plugins: [vue()],
  // relative asset paths: the monitor serves dist/ at its root, behind any prefix a proxy adds
  base: "./",
  build: { chunkSizeWarningLimit: 1000 },
  server: { proxy: { "/graphql": { target: monitor, ws: true } } },
  test: { include: ["src/**/*.test.ts"], environment: "node" },
});
