// The submission page: the submission's result (followed until graded) and its code.

import { follow, view } from "./submission_view.js";

const root = document.getElementById("submission");
const staff = root.dataset.staff === "true";
const result = document.getElementById("result");
const code = document.getElementById("code");
const message = document.getElementById("message");

follow(root.dataset.submissionId, (submission) => {
  message.textContent = "";
  result.replaceChildren(view(submission, { staff }));
  code.textContent = submission.code;
}, { onRetry: (error) => { message.textContent = `reconnecting… (${error.message})`; } })
  .then(() => { root.dataset.ready = "true"; })
  .catch((error) => { message.textContent = `this submission could not be loaded: ${error.message}`; });
