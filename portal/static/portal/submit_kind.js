// The submit form shows the fields of the kind chosen (batch job, session, endpoint) and only those: the
// others are hidden and disabled, so they are neither seen nor submitted (nor quoted). A field's kinds are
// in its container's data-kinds. Without this script every field shows, and the server still refuses a
// field of another kind with its own error.
(function () {
  "use strict";
  const form = document.querySelector("form[data-quote-url]");
  if (!form || !form.elements.kind) return;
  // A job of roles has its size in its roles: while a role row is filled, the job's own size fields are
  // disabled (not submitted), as the server would refuse them ("set per role").
  const SIZED = ["gpus", "pods", "cpu", "memory", "shm_mb"];
  function rolesGiven() {
    return Array.from(form.querySelectorAll("[data-role-row] input"))
      .some((input) => !input.disabled && input.value.trim() !== "");
  }
  function apply() {
    const kind = form.elements.kind.value;
    form.querySelectorAll("[data-kinds]").forEach((box) => {
      const shown = box.dataset.kinds.split(" ").includes(kind);
      box.hidden = !shown;
      box.querySelectorAll("input, select, textarea").forEach((input) => { input.disabled = !shown; });
    });
    const roles = rolesGiven();
    SIZED.forEach((name) => {
      const input = form.elements[name];
      if (!input) return;
      const box = input.closest("[data-kinds]");
      input.disabled = roles || Boolean(box && box.hidden);
    });
  }
  form.elements.kind.addEventListener("change", apply);
  form.addEventListener("input", (event) => { if (event.target.closest("[data-role-row]")) apply(); });
  apply();
})();
