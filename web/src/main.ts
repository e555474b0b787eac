import { createApp } from "vue";
import "uplot/dist/uPlot.min.css";
import "./style.css";
import App from "./App.vue";
import { router } from "./router";

createApp(App).use(router).mount("#app");
