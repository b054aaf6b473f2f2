// Search snippets, from disk and over http.
//
// Sphinx's search shows a snippet under each result by fetching the result's page. Browsers
// refuse fetch() on file: URLs, so a site opened from disk would show titles only, and the
// fetched HTML holds the TeX source of every formula (MathJax has not run on it). The build
// (docs/_ext/posenc_site.py, write_search_texts) writes the main content of every page, formulas
// as plain text, into _static/search-text/<page>.js; here a fetch of one of the site's pages is
// answered from that file, loaded with a <script> tag (which file: allows). A page without such
// a file is fetched as before.
(function () {
  "use strict";
  if (window.posencSearchOffline) return;
  window.posencSearchOffline = true;
  window.posencSearchText = window.posencSearchText || {};
  const root = new URL(document.documentElement.dataset.content_root || "./", window.location.href);
  const realFetch = window.fetch ? window.fetch.bind(window) : null;
  const pageOf = (input) => {
    const url = new URL(typeof input === "string" ? input : input.url, window.location.href);
    if (!url.href.startsWith(root.href)) return null;
    const rel = decodeURIComponent(url.pathname.slice(root.pathname.length));
    return rel.endsWith(".html") ? rel.slice(0, -5) : null;
  };
  window.fetch = function (input, init) {
    const page = pageOf(input);
    if (page === null) return realFetch(input, init);
    return new Promise((resolve) => {
      const answer = () => (page in window.posencSearchText || !realFetch
        ? resolve(new Response(window.posencSearchText[page] || "", { headers: { "Content-Type": "text/html" } }))
        : resolve(realFetch(input, init)));
      if (page in window.posencSearchText) return answer();
      const script = document.createElement("script");
      script.src = new URL(`_static/search-text/${page}.js`, root).href;
      script.onload = answer;
      script.onerror = answer;
      document.head.appendChild(script);
    });
  };
})();
