// The submit form's live quote: after the fields stop changing for a moment, post the form to its quote
// fragment (same validation as a submission) and show the answer beside the form.
(function () {
  "use strict";
  const form = document.querySelector("form[data-quote-url]");
  const box = document.getElementById("quote");
  if (!form || !box) return;
  const DELAY_MS = 400;
  let timer = null;
  let seq = 0;
  const touched = new Set();
  async function refresh() {
    const mine = ++seq;
    const body = new FormData(form);
    box.setAttribute("aria-busy", "true");
    try {
      const r = await fetch(form.dataset.quoteUrl, {
        method: "POST", body: body, credentials: "same-origin",
        headers: { "X-CSRFToken": body.get("csrfmiddlewaretoken") || "" },
      });
      if (mine !== seq) return;  // a later change already asked again
      if (r.status !== 200 && r.status !== 400) throw new Error(String(r.status));
      const html = await r.text();
      const doc = new DOMParser().parseFromString(html, "text/html");
      const fresh = doc.getElementById("quote-body");
      if (!fresh) throw new Error("no quote");
      box.replaceChildren(document.importNode(fresh, true));
      const bad = new Set(Array.from(fresh.querySelectorAll("[data-quote-error]"), (el) => el.dataset.quoteError));
      // A field is marked only once the user has changed it (or a submission marked it): an empty form is
      // not wrong before anything is typed.
      form.querySelectorAll("input[name], select[name], textarea[name]").forEach((el) => {
        if (!bad.has(el.name)) el.removeAttribute("aria-invalid");
        else if (touched.has(el.name)) el.setAttribute("aria-invalid", "true");
      });
    } catch (e) {
      if (mine === seq) box.textContent = "The quote is unavailable right now.";
    } finally {
      if (mine === seq) box.removeAttribute("aria-busy");
    }
  }
  function schedule(event) {
    if (event && event.target && event.target.name) touched.add(event.target.name);
    clearTimeout(timer);
    timer = setTimeout(refresh, DELAY_MS);
  }
  form.addEventListener("input", schedule);
  form.addEventListener("change", schedule);
  refresh();
})();
