// The submit form shows the fields of the kind chosen (batch job, session, endpoint) and only those: the
// others are hidden and disabled, so they are neither seen nor submitted (nor quoted). A field's kinds are
// in its container's data-kinds. Without this script every field shows, and the server still refuses a
// field of another kind with its own error.
(function () {
  "use strict";
  const form = document.querySelector("form[data-quote-url]");
  if (!form || !form.elements.kind) return;
  function apply() {
    const kind = form.elements.kind.value;
    form.querySelectorAll("[data-kinds]").forEach((box) => {
      const shown = box.dataset.kinds.split(" ").includes(kind);
      box.hidden = !shown;
      box.querySelectorAll("input, select, textarea").forEach((input) => { input.disabled = !shown; });
    });
  }
  form.elements.kind.addEventListener("change", apply);
  apply();
})();
