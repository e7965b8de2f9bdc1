// The quota form: choosing another flavor (or cluster) fills in the quota in force there, so the numbers
// shown are always the ones a change starts from, never blanks that would read as "no limit"; and says what the
// other departments hold there and what is left to ask for.
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
  // what the other departments hold of the chosen scope, and what is left to ask for
  const roomData = document.getElementById("quota-room-data");
  const roomLine = document.getElementById("quota-room");
  const room = roomData ? JSON.parse(roomData.textContent) : {};
  function showRoom() {
    if (!roomLine) return;
    const flavor = form.elements.flavor.value;
    const cluster = form.elements.cluster ? form.elements.cluster.value : "";
    const r = room[cluster ? flavor + "@" + cluster : flavor];
    const tail = roomLine.dataset.tail || "";
    roomLine.textContent = r ? "The other departments' nominal quotas here come to " + r.others + " of " +
      r.capacity + " installed GPUs: " + r.left + " left to ask for" + tail + "." : "";
  }
  form.elements.flavor.addEventListener("change", showRoom);
  if (form.elements.cluster) form.elements.cluster.addEventListener("change", showRoom);
  form.elements.flavor.addEventListener("change", fill);
  if (form.elements.cluster) form.elements.cluster.addEventListener("change", fill);
})();
