// Renders the formulas that pymdownx.arithmatex marks (generic output) with the
// KaTeX copy served beside this file (KaTeX 0.16.4, MIT, from Debian's libjs-katex:
// katex.min.js, katex.min.css, contrib/auto-render.js and the fonts/*.woff2 the
// stylesheet names first; LICENSE is its copyright file), on every page load.
document$.subscribe(({ body }) => {
  renderMathInElement(body, {
    delimiters: [
      { left: "$$", right: "$$", display: true },
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true },
    ],
    throwOnError: false,
  });
});
