// The account pages: copy a key shown once, and confirm before revoking. No inline scripts (CSP).

document.querySelectorAll("form[data-confirm]").forEach((form) => {
  form.addEventListener("submit", (event) => {
    if (!window.confirm(form.dataset.confirm)) event.preventDefault();
  });
});

function selectText(element) {
  const range = document.createRange();
  range.selectNodeContents(element);
  const selection = window.getSelection();
  selection.removeAllRanges();
  selection.addRange(range);
}

document.querySelectorAll("button[data-copy]").forEach((button) => {
  const target = document.getElementById(button.dataset.copy);
  const status = button.parentElement.querySelector(".copy-status");
  const say = (text) => { if (status) status.textContent = text; };
  button.addEventListener("click", () => {
    selectText(target);
    // The clipboard needs a secure context and permission; without them the text stays selected.
    if (!navigator.clipboard) { say("Selected: press Ctrl+C to copy."); return; }
    navigator.clipboard.writeText(target.textContent.trim()).then(
      () => say("Copied."),
      () => say("Selected: press Ctrl+C to copy."),
    );
  });
});
