// Figures of the posenc_np site: every image in a page's text opens at full size when clicked
// (an overlay that scrolls; Escape, a click or the close button dismisses it). Without
// JavaScript the image link (added here, or by Sphinx for scaled images) opens the file itself.
(function () {
  "use strict";
  const open = (src, alt) => {
    const overlay = document.createElement("div");
    overlay.className = "posenc-zoom";
    overlay.setAttribute("role", "dialog");
    overlay.setAttribute("aria-label", alt || "figure");
    const img = document.createElement("img");
    img.src = src;
    img.alt = alt || "";
    const close = document.createElement("button");
    close.type = "button";
    close.className = "posenc-zoom-close";
    close.setAttribute("aria-label", "close");
    close.textContent = "\u00d7";
    overlay.append(close, img);
    const dismiss = () => { overlay.remove(); document.removeEventListener("keydown", onKey); };
    const onKey = (e) => { if (e.key === "Escape") dismiss(); };
    overlay.addEventListener("click", dismiss);
    document.addEventListener("keydown", onKey);
    document.body.appendChild(overlay);
    close.focus();
  };
  const init = () => {
    document.querySelectorAll("article.bd-article img").forEach((img) => {
      if (img.closest(".posenc-zoom")) return;
      let link = img.closest("a");
      if (link && !link.classList.contains("image-reference")) return;  // an image that links elsewhere
      if (!link) {
        link = document.createElement("a");
        link.href = img.getAttribute("src");
        img.replaceWith(link);
        link.appendChild(img);
      }
      link.classList.add("posenc-figure-link");
      link.title = "click to enlarge";
      link.addEventListener("click", (e) => {
        if (e.ctrlKey || e.metaKey || e.shiftKey) return;
        e.preventDefault();
        open(img.currentSrc || img.src, img.alt);
      });
    });
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
