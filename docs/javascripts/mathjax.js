// MathJax 3's configuration for the minirl site. MathJax itself is copied into the site from the
// PyPI package django-static-mathjax (docs/hooks/minirl_site.py); nothing is loaded from the web.
// It typesets only where formulas live, so a `$` elsewhere (prose, code, cell outputs) stays text:
//   - pymdownx.arithmatex's output on Markdown pages and in docstrings: \(...\) and \[...\];
//   - notebook markdown cells (mkdocs-jupyter keeps their $...$ and $$...$$ as written).
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,        // \$ is a dollar sign
    processEnvironments: true,   // \begin{aligned} ... without $$
    packages: {"[-]": ["noundefined"]},  // an unknown macro is an error (red box), not silent red text
  },
  startup: {
    typeset: false,  // not the whole page: only the elements below
    pageReady() {
      return MathJax.startup.defaultPageReady().then(() =>
        MathJax.typesetPromise(Array.from(document.querySelectorAll(window.MINIRL_MATH_SELECTOR))));
    },
  },
};
// The elements that hold formulas (the browser test reads the same selector).
window.MINIRL_MATH_SELECTOR = ".arithmatex, .jp-MarkdownCell .jp-RenderedMarkdown";
