// eslint for Cordon's own JavaScript: the browser's ES modules (static/js) and their tests, which
// node's test runner runs (tests/js). `make lint` runs it from the repository's root, where the
// patterns below start:
//   playground/frontend/node_modules/.bin/eslint --config playground/frontend/eslint.config.mjs static/js tests/js
// The vendored bundles (static/vendor) are built, not written here, and are not linted.
import js from "@eslint/js";
import globals from "globals";

export default [
  { ignores: ["static/vendor/**"] },
  js.configs.recommended,
  {
    linterOptions: { reportUnusedDisableDirectives: "error" },
  },
  {
    files: ["static/js/**/*.js"],
    languageOptions: {
      sourceType: "module",
      globals: {
        ...globals.browser,
        // The vendored bundles: classic scripts, loaded before the page's modules, that define these.
        CordonEditor: "readonly",  // static/vendor/codemirror.js (playground/frontend/entry.js)
        uPlot: "readonly",  // static/vendor/uplot.min.js
      },
    },
    rules: {
      // A function or module that grows past these is doing more than one job: split it by job.
      "max-lines-per-function": ["error", { max: 120, skipBlankLines: true, skipComments: true }],
      "max-lines": ["error", { max: 500, skipBlankLines: true, skipComments: true }],
    },
  },
  {
    files: ["tests/js/**/*.mjs"],
    languageOptions: { sourceType: "module", globals: globals.node },
  },
];
