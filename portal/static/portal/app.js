// Live state for the dashboard: poll the API (same-origin session) and update states in place.
(function () {
  "use strict";
  const POLL_MS = 3000;
  async function get(url) {
    const r = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!r.ok) throw new Error(r.status);
    return r.json();
  }
  function reasonText(job) {
    if (job.state !== "queued" && job.state !== "pending_approval") return "";
    let text = job.reason.message || "";
    if (job.estimated_start) {
      const d = new Date(job.estimated_start);
      text += " · starts ~" + d.toISOString().substring(11, 16);
    }
    return text;
  }
  function setState(el, state) {
    if (!el || el.textContent === state) return false;
    el.textContent = state;
    el.className = "state state-" + state;
    return true;
  }
  async function refreshList(table) {
    const rows = table.querySelectorAll("tr[data-job]");
    if (!rows.length) return;
    const page = await get("/api/v1/jobs?page_size=500");
    const byId = new Map(page.results.map((j) => [String(j.id), j]));
    rows.forEach((row) => {
      const job = byId.get(row.dataset.job);
      if (!job) return;
      setState(row.querySelector('[data-field="state"]'), job.state);
      const reason = row.querySelector('[data-field="reason"]');
      if (reason) reason.textContent = reasonText(job);
    });
  }
  async function refreshJob(badge) {
    const job = await get("/api/v1/jobs/" + badge.dataset.jobId);
    if (setState(badge, job.state) || document.querySelectorAll("#timeline li").length !== job.events.length) {
      window.location.reload();
    }
  }
  function loop(fn, el) {
    const tick = () => fn(el).catch(() => {}).finally(() => setTimeout(tick, POLL_MS));
    setTimeout(tick, POLL_MS);
  }
  const table = document.querySelector("table[data-live]");
  if (table) loop(refreshList, table);
  // A live attempt's log: ask for the text with the ETag last seen; 304 costs nothing when it did not change.
  async function followLog(pre) {
    const r = await fetch(pre.dataset.follow, {
      credentials: "same-origin", headers: pre.dataset.etag ? { "If-None-Match": pre.dataset.etag } : {},
    });
    if (r.status === 304) return;
    if (!r.ok) throw new Error(r.status);
    pre.dataset.etag = r.headers.get("ETag") || "";
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.textContent = await r.text();
    if (atEnd) pre.scrollTop = pre.scrollHeight;
    if (r.headers.get("X-Log-Live") === "0") window.location.reload();  // ended: show the kept log
  }
  const logPre = document.querySelector("pre[data-follow]");
  if (logPre) loop(followLog, logPre);
  const badge = document.getElementById("job-state");
  if (badge) loop(refreshJob, badge);
})();
