// meshhub console: live updates (server-sent events), ages and countdowns,
// and the admin actions for a browser holding the admin token. The pages
// are complete without this script; it only keeps them current.
"use strict";

(function () {
  const TOKEN_KEY = "meshhub.adminToken";
  const $ = (sel) => document.querySelector(sel);

  // Ages ("12 s ago") and countdowns ("3 min 05 s left"), every second.
  function fmtAge(secs) {
    if (secs < 60) return secs + " s ago";
    if (secs < 3600) return Math.floor(secs / 60) + " min ago";
    if (secs < 86400) return Math.floor(secs / 3600) + " h ago";
    return Math.floor(secs / 86400) + " d ago";
  }
  function tick() {
    const now = Date.now();
    for (const t of document.querySelectorAll("time[data-age]")) {
      const at = Date.parse(t.getAttribute("datetime"));
      if (!Number.isNaN(at)) t.textContent = fmtAge(Math.max(0, Math.floor((now - at) / 1000)));
    }
    for (const t of document.querySelectorAll("time[data-until]")) {
      const left = Math.max(0, Math.floor((Number(t.dataset.until) - now) / 1000));
      t.textContent = Math.floor(left / 60) + " min " + String(left % 60).padStart(2, "0") + " s left";
    }
  }

  function announce(text) {
    const a = $("#announce");
    if (a) a.textContent = text;
  }

  // Every URL is the page's own, relative (no leading "/"): behind a
  // proxy that serves the hub under a path (kubectl proxy) they stay in it.
  // `data-root` leads from the page to the admin port's root.
  const root = () => document.body.dataset.root || "";

  // Live updates: one event stream per page, the one the page names.
  function follow() {
    const url = document.body.dataset.events;
    if (!url) return;
    const state = $("#live-state");
    const es = new EventSource(url);
    es.onopen = () => { if (state) state.textContent = "Live"; document.body.dataset.connected = "1"; };
    es.onerror = () => { if (state) state.textContent = "Reconnecting…"; document.body.dataset.connected = "0"; };
    es.addEventListener("fleet", (e) => {
      const f = JSON.parse(e.data);
      // Focus on a row's link survives the new rows.
      const row = document.activeElement && document.activeElement.closest("#fleet-rows tr[data-cluster]");
      const focused = row ? row.dataset.cluster : null;
      $("#fleet-summary").innerHTML = f.summary;
      $("#fleet-rows").innerHTML = f.rows;
      $("#fleet-pager").innerHTML = f.pager;
      $("#fleet-consumers").innerHTML = f.consumers;
      if (focused) {
        for (const tr of document.querySelectorAll("#fleet-rows tr[data-cluster]")) {
          if (tr.dataset.cluster === focused) { const a = tr.querySelector("a"); if (a) a.focus(); }
        }
      }
      updated();
    });
    es.addEventListener("rollout", (e) => {
      const focused = focusedAction($("#rollout"));
      replaceKeepingOpen($("#rollout"), JSON.parse(e.data).html);
      showActions(focused);
      updated();
    });
    es.addEventListener("cluster", (e) => {
      replaceKeepingOpen($("#cluster-live"), JSON.parse(e.data).html);
      updated();
    });
  }

  // Replaces `el`'s content; <details> opened by the reader stay open.
  function replaceKeepingOpen(el, html) {
    const open = new Set([...el.querySelectorAll("details[open][id]")].map((d) => d.id));
    el.innerHTML = html;
    for (const id of open) { const d = document.getElementById(id); if (d) d.open = true; }
  }

  function updated() {
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
    tick();
  }

  // The admin session: the buttons appear only once /console/session
  // accepts the token (or the hub needs none: a loopback admin port).
  let admin = false;
  function headers() {
    const h = { "x-meshhub-user": "console" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) h["Authorization"] = "Bearer " + token;
    return h;
  }
  async function checkSession() {
    const box = $("#session");
    if (!box || !$("#rollout")) return;
    let r;
    try {
      r = await fetch(root() + "console/session", { headers: headers(), cache: "no-store" });
    } catch (e) {
      return;
    }
    admin = r.status === 204;
    box.replaceChildren();
    if (admin) {
      const s = document.createElement("span");
      s.textContent = "Admin actions enabled";
      box.append(s);
      if (sessionStorage.getItem(TOKEN_KEY)) {
        const out = document.createElement("button");
        out.type = "button";
        out.textContent = "Forget token";
        out.addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); location.reload(); });
        box.append(" ", out);
      }
    } else {
      const form = document.createElement("form");
      form.setAttribute("aria-label", "Enable admin actions");
      const label = document.createElement("label");
      label.htmlFor = "admin-token";
      label.textContent = "Admin token";
      const input = document.createElement("input");
      input.type = "password";
      input.id = "admin-token";
      input.autocomplete = "off";
      const button = document.createElement("button");
      button.type = "submit";
      button.textContent = "Enable actions";
      form.append(label, " ", input, " ", button);
      if (r.status === 403 && sessionStorage.getItem(TOKEN_KEY)) {
        const err = document.createElement("span");
        err.className = "error";
        err.setAttribute("role", "alert");
        err.textContent = " That token was refused.";
        form.append(err);
      }
      form.addEventListener("submit", (e) => {
        e.preventDefault();
        sessionStorage.setItem(TOKEN_KEY, input.value.trim());
        checkSession();
      });
      box.append(form);
    }
    showActions();
  }

  // The URL of the action button focused in `box`, if any.
  function focusedAction(box) {
    const a = document.activeElement;
    return box && a && box.contains(a) && a.dataset.url ? a.dataset.url : null;
  }

  // The buttons, from the rollout section's templates (their labels and
  // which are shown or enabled follow the phase and each cluster's state):
  // the rollout's own in #actions, each cluster's beside it. The focused
  // one keeps focus (`focused`: the URL of one the section held).
  function showActions(focused) {
    const slot = $("#actions");
    const tpl = $("#rollout-actions");
    if (!slot) return;
    focused = focused || focusedAction(slot);
    slot.replaceChildren();
    for (const s of document.querySelectorAll("#rollout .cluster-actions-shown")) s.remove();
    if (!admin) return;
    if (tpl) slot.append(tpl.content.cloneNode(true));
    for (const t of document.querySelectorAll("#rollout template.cluster-actions")) {
      const span = document.createElement("span");
      span.className = "cluster-actions-shown";
      span.append(t.content.cloneNode(true));
      t.after(span);
    }
    for (const b of document.querySelectorAll("#actions button[data-url], #rollout button[data-url]")) {
      b.addEventListener("click", () => act(b));
      if (b.dataset.url === focused) b.focus();
    }
  }

  // Posts the button's request (its data-url, relative to the page).
  async function act(b) {
    const result = $("#action-result");
    const what = b.dataset.action + (b.dataset.cluster ? " " + b.dataset.cluster : "");
    if (b.dataset.action === "abort" && !b.dataset.cluster &&
        !confirm("Abort the rollout? Clusters already updated follow the policy's onFailure.")) return;
    result.textContent = what + "…";
    try {
      const r = await fetch(b.dataset.url, { method: "POST", headers: headers() });
      if (r.ok) {
        // The answer is the whole rollout: the page shows it already.
        result.textContent = "Done: " + what + ".";
      } else {
        const text = (await r.text()).trim();
        result.textContent = "Refused (" + r.status + "): " + text;
      }
      announce(result.textContent);
    } catch (e) {
      result.textContent = "Failed: " + e;
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    tick();
    setInterval(tick, 1000);
    follow();
    checkSession();
  });
})();
