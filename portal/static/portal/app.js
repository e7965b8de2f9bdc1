// Live state for the dashboard. Pages poll a small fragment, /jobs/live?ids=..., for the jobs they show
// (never the whole job list), sending the last ETag: while nothing changed the answer is an empty 304.
(function () {
  "use strict";
  const POLL_MS = 3000;
  function loop(fn, el) {
    const tick = () => fn(el).catch(() => {}).finally(() => setTimeout(tick, POLL_MS));
    setTimeout(tick, POLL_MS);
  }
  // GET with the ETag last seen for this URL; null when unchanged (304).
  const etags = new Map();
  async function poll(url) {
    const headers = { Accept: "application/json" };
    if (etags.has(url)) headers["If-None-Match"] = etags.get(url);
    const r = await fetch(url, { credentials: "same-origin", headers: headers });
    if (r.status === 304) return null;
    if (!r.ok) throw new Error(r.status);
    etags.set(url, r.headers.get("ETag") || "");
    return r.json();
  }
  function reasonText(job) {
    if (job.state !== "queued" && job.state !== "pending_approval") return "";
    let text = job.reason_message || "";
    if (job.eta) text += " · starts ~" + new Date(job.eta).toISOString().substring(11, 16) + " UTC";
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
    const ids = Array.from(rows, (row) => row.dataset.job).join(",");
    const body = await poll("/jobs/live?ids=" + ids);
    if (!body) return;
    const byId = new Map(body.jobs.map((j) => [String(j.id), j]));
    rows.forEach((row) => {
      const job = byId.get(row.dataset.job);
      if (!job) return;
      setState(row.querySelector('[data-field="state"]'), job.state);
      const reason = row.querySelector('[data-field="reason"]');
      if (reason) reason.textContent = reasonText(job);
    });
  }
  async function refreshJob(badge) {
    const body = await poll("/jobs/live?ids=" + badge.dataset.jobId);
    if (!body || !body.jobs.length) return;
    const job = body.jobs[0];
    if (job.state !== badge.textContent || String(job.n_events) !== badge.dataset.events) window.location.reload();
  }
  async function refreshHome(card) {
    const body = await poll("/jobs/live?ids=" + card.dataset.liveJobs);
    if (body && body.jobs.some((j) => { const b = card.querySelector('[data-job-state="' + j.id + '"]'); return b && b.textContent !== j.state; })) {
      window.location.reload();
    }
  }
  // A live attempt's log: the text with the ETag last seen; 304 costs nothing when it did not change.
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
  // Destructive actions ask first: a form with data-confirm submits only when confirmed.
  document.querySelectorAll("form[data-confirm]").forEach((form) => {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  });
  const table = document.querySelector("table[data-live]");
  if (table) loop(refreshList, table);
  const badge = document.getElementById("job-state");
  if (badge) loop(refreshJob, badge);
  const home = document.querySelector("[data-live-jobs]");
  if (home && home.dataset.liveJobs) loop(refreshHome, home);
  const logPre = document.querySelector("pre[data-follow]");
  if (logPre) loop(followLog, logPre);
})();
