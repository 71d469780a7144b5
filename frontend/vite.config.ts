import { defineConfig } from "vite";

// The API (`syncline api`) serves the built bundle at `/`; in development `npm run dev` proxies
// the API routes to a running `syncline api` on its default port.
const api = "http://127.0.0.1:8600";

export default defineConfig({
  base: "./",
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    chunkSizeWarningLimit: 400,
  },
  server: {
    host: "127.0.0.1",
    port: 5173,
    proxy: {
      "/api": { target: api, changeOrigin: false },
      "/healthz": { target: api },
      "/metrics": { target: api },
      "/openapi.json": { target: api },
      "/docs": { target: api },
    },
  },
});
