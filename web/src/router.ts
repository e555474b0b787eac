import { createRouter, createWebHashHistory } from "vue-router";
import { apiKey } from "./api/key";

// Hash history: the monitor serves dist/ as static files, so every route must resolve to index.html.
export const router = createRouter({
  history: createWebHashHistory(),
  routes: [
    { path: "/login", name: "login", component: () => import("./views/LoginView.vue") },
    { path: "/", name: "sessions", component: () => import("./views/SessionsView.vue") },
    { path: "/sessions/:id", name: "session", component: () => import("./views/SessionView.vue"), props: true },
    {
      path: "/sessions/:id/topology",
      name: "topology",
      component: () => import("./views/TopologyView.vue"),
      props: true,
    },
    { path: "/pnodes", name: "pnodes", component: () => import("./views/PNodesView.vue") },
  ],
});

router.beforeEach((to) => {
  if (!apiKey.value && to.name !== "login") return { name: "login", query: { next: to.fullPath } };
});
