// The status page of mcpfsm: every second, the servers' part of the page is fetched
// again (rendered by the server, pictures included) and put in place if it changed.
"use strict";
(function () {
  const servers = document.getElementById("servers");
  const live = document.getElementById("live");
  let last = "";
  async function poll() {
    try {
      const res = await fetch("/view", { cache: "no-store" });
      if (!res.ok) throw new Error(res.statusText);
      const html = await res.text();
      // The timestamp line changes every time; compare the rest.
      const body = html.replace(/^<p class="updated"[^\n]*\n/, "");
      const open = new Set([...servers.querySelectorAll("details:not([open])")].map((d) => d.closest("section")?.id));
      if (body !== last) {
        servers.innerHTML = html;
        for (const id of open) servers.querySelector("#" + CSS.escape(id) + " details")?.removeAttribute("open");
        last = body;
      } else {
        servers.querySelector(".updated")?.replaceWith(new DOMParser().parseFromString(html, "text/html").querySelector(".updated"));
      }
      live.textContent = "live";
      live.className = "live";
    } catch (e) {
      live.textContent = "disconnected";
      live.className = "live down";
    }
    setTimeout(poll, 1000);
  }
  setTimeout(poll, 1000);
})();
