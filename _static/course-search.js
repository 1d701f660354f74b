/* Search result snippets without the page's chrome or TeX source.
 *
 * Sphinx's searchtools.js writes each result's snippet from the text of that page's [role="main"]
 * (Search.htmlToText), fetched as built: before MathJax has typeset it, and with the article header in it. The
 * snippet would then start with the language switcher's label ("English", "中文") and show formulas as TeX
 * (\(QK^\top\)). This wraps Search.htmlToText to leave the page's chrome out (the switcher among it) and to
 * write each formula as plain text (QKᵀ). Jupyter Book loads every .js of _static/ on every page; this does
 * nothing where there is no search.
 */
"use strict";

(() => {
  // Left out of a snippet, as no part of what the page says: the article's header bar (its buttons and the link
  // to the page in the other language, coursekit/i18n/templates/lang-switcher.html), and the title and contents
  // that only a printout shows (Jupyter Book's #jb-print-docs-body).
  const CHROME = ".bd-header-article, .course-lang-switcher, .onlyprint";

  // TeX commands written as the character they print; a command not listed here is dropped.
  const SYMBOLS = {
    top: "ᵀ", cdot: "·", times: "×", le: "≤", leq: "≤", ge: "≥", geq: "≥", ne: "≠", neq: "≠", approx: "≈",
    to: "→", rightarrow: "→", Rightarrow: "⇒", Longrightarrow: "⟹", mapsto: "↦", infty: "∞", in: "∈",
    sum: "Σ", prod: "∏", dots: "…", ldots: "…", cdots: "⋯", odot: "⊙", otimes: "⊗", oplus: "⊕", ell: "ℓ",
    lfloor: "⌊", rfloor: "⌋", lceil: "⌈", rceil: "⌉", langle: "⟨", rangle: "⟩", bmod: " mod ", mod: " mod ",
    pm: "±", sim: "∼", propto: "∝", partial: "∂", nabla: "∇", log: "log", exp: "exp", max: "max", min: "min", arg: "arg", sin: "sin", cos: "cos",
    tanh: "tanh",
    alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", varepsilon: "ε", eta: "η", theta: "θ",
    lambda: "λ", mu: "μ", pi: "π", rho: "ρ", sigma: "σ", tau: "τ", phi: "φ", varphi: "φ", psi: "ψ", omega: "ω",
    Gamma: "Γ", Delta: "Δ", Theta: "Θ", Lambda: "Λ", Pi: "Π", Sigma: "Σ", Phi: "Φ", Psi: "Ψ", Omega: "Ω",
  };
  const BLACKBOARD = { R: "ℝ", N: "ℕ", Z: "ℤ", Q: "ℚ", C: "ℂ" };
  // Commands whose one argument is text to keep as it is: \text{若查询}, \mathrm{softmax}.
  const WORDS = /\\(?:text|textrm|texttt|textbf|mathrm|mathbf|mathit|mathsf|mathtt|operatorname|boldsymbol)\s*\{([^{}]*)\}/g;
  const FRACTION = /\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}/g;

  /** A formula's TeX source as the plain text a snippet can show: \(QK^\top\) -> QKᵀ. */
  const plainMath = (tex) => {
    // \{ and \} are braces to print; the others group, and go.
    let text = tex.trim().replace(/^\\[([]|\\[)\]]$/g, "").replace(/^\$\$?|\$\$?$/g, "")
      .replace(/\\\{/g, "\u0001").replace(/\\\}/g, "\u0002");
    text = text.replace(/\\mathbb\s*\{([^{}]*)\}/g, (_, letter) => BLACKBOARD[letter] || letter);
    for (let before = ""; before !== text;) {  // nested groups, innermost first: \frac{QK^\top}{\sqrt{d_k}}
      before = text;
      text = text
        .replace(WORDS, "$1")
        .replace(/\\sqrt\s*\{([^{}]*)\}/g, (_, x) => (/^\w+$/.test(x) ? `√${x}` : `√(${x})`))
        .replace(/([_^])\s*\{([^{}]*)\}/g, (_, script, x) => (/^((?:\w|\\_)+|\\[A-Za-z]+)$/.test(x) ? script + x : `${script}(${x})`))
        .replace(FRACTION, "($1)/($2)");
    }
    text = text
      .replace(/\\(?:begin|end)\s*\{[^{}]*\}/g, " ")
      .replace(/\\\\|\\(?:quad|qquad)\b|\\[,;:! ]|(?<!\\)&/g, " ")   // line breaks, spaces, alignment
      .replace(/\\([_%#$&])/g, "$1")
      .replace(/\\([A-Za-z]+)/g, (_, name) => SYMBOLS[name] || "")
      .replace(/\^\s*\{?\s*ᵀ\s*\}?/g, "ᵀ")
      .replace(/[{}]/g, "");
    return text.replace(/\u0001/g, "{").replace(/\u0002/g, "}").replace(/\s+/g, " ").trim();
  };

  const patch = () => {
    if (typeof Search === "undefined" || Search.htmlToText.coursePlain) return;
    const htmlToText = Search.htmlToText;
    const plain = (htmlString, anchor) => {
      const page = new DOMParser().parseFromString(htmlString, "text/html");
      page.querySelectorAll(CHROME).forEach((element) => element.remove());
      page.querySelectorAll(".math").forEach((element) => {
        element.textContent = plainMath(element.textContent);
      });
      return htmlToText(page.documentElement.outerHTML, anchor);
    };
    plain.coursePlain = true;
    Search.htmlToText = plain;
  };

  // searchtools.js may come after this script; it defines Search before the page's DOMContentLoaded, and the
  // snippets are fetched later still.
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", patch);
  else patch();

  window.coursePlainMath = plainMath;  // for the tests
})();
