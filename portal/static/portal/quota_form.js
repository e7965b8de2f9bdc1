// The quota form: choosing another flavor (or cluster) fills in the quota in force there, so the numbers
// shown are always the ones a change starts from, never blanks that would read as "no limit".
(function () {
  "use strict";
  const data = document.getElementById("quota-in-force");
  const form = document.querySelector("#quota-form form");
  if (!data || !form) return;
  const inForce = JSON.parse(data.textContent);
  const fields = ["nominal", "borrowing_limit", "lending_limit", "borrowing_unlimited", "lending_all"];
  function fill() {
    const flavor = form.elements.flavor.value;
    const cluster = form.elements.cluster ? form.elements.cluster.value : "";
    const values = inForce[cluster ? flavor + "@" + cluster : flavor] || {};
    fields.forEach((name) => {
      const input = form.elements[name];
      if (!input) return;
      if (input.type === "checkbox") input.checked = values[name] === "on";
      else input.value = values[name] || "";
    });
  }
  form.elements.flavor.addEventListener("change", fill);
  if (form.elements.cluster) form.elements.cluster.addEventListener("change", fill);
})();
