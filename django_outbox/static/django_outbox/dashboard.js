// The dashboard (admin/django_outbox/dashboard.html): its numbers refreshed in place.
(function () {
  // Refresh the numbers every 5 s: fetch this page's partial and swap it in.
  var box = document.getElementById("outbox-dashboard");
  var url = window.location.pathname + "?partial=1";
  function refresh() {
    fetch(url, {credentials: "same-origin", headers: {"X-Requested-With": "fetch"}})
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.text(); })
      .then(function (html) { box.innerHTML = html; box.removeAttribute("data-stale"); })
      .catch(function () { box.setAttribute("data-stale", "1"); });
  }
  setInterval(refresh, 1000 * Number(box.dataset.refreshSeconds));
})();
