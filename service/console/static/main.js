// Sign-in and navigation. Views are chosen by the URL's fragment (#/runs, #/runs/<id>, ...), which holds
// ids and filters, never the key.

import { api, ApiError, session } from "./api.js";
import { vendorsView } from "./charts.js";
import { notice } from "./dom.js";
import { runView, runsView } from "./runs.js";
import { subscriptionView, subscriptionsView } from "./subscriptions.js";

const $ = (id) => document.getElementById(id);
let dispose = () => {};

function route() {
  dispose();
  const [path, query = ""] = location.hash.replace(/^#/, "").split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(query);
  const root = $("view");
  for (const link of document.querySelectorAll("nav a")) {
    link.classList.toggle("current", link.dataset.section === (parts[0] || "runs"));
  }
  if (parts[0] === "runs" && parts[1]) dispose = runView(root, parts[1]);
  else if (parts[0] === "subscriptions" && parts[1]) dispose = subscriptionView(root, parts[1]);
  else if (parts[0] === "subscriptions") dispose = subscriptionsView(root);
  else if (parts[0] === "vendors") dispose = vendorsView(root);
  else dispose = runsView(root, params);
}

function show(signedIn) {
  $("signin").hidden = signedIn;
  $("console").hidden = !signedIn;
  if (signedIn) route();
  else {
    dispose();
    dispose = () => {};
    $("view").replaceChildren();
    $("key").focus();
  }
}

async function signIn(event) {
  event.preventDefault();
  const field = $("key");
  const key = field.value.trim();
  field.value = "";
  if (!key) return;
  try {
    // Any authenticated read proves the key; the cheapest is one subscription.
    await api("/v1/subscriptions?limit=1", { key });
  } catch (e) {
    const text = e instanceof ApiError && e.status === 401 ? "That API key is not valid." : `Sign-in failed: ${e.message}`;
    notice($("signin-error"), text, "error");
    return;
  }
  notice($("signin-error"), "");
  session.signIn(key);
  show(true);
}

function signOut() {
  session.signOut();
  show(false);
}

$("signin-form").addEventListener("submit", signIn);
$("signout").addEventListener("click", signOut);
window.addEventListener("hashchange", () => session.key && route());
window.addEventListener("hb:unauthorized", () => {
  signOut();
  notice($("signin-error"), "Signed out: the API refused the key.", "error");
});
show(Boolean(session.key));
