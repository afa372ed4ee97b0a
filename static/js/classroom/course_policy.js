// A course's policy, for its instructors: the runtimes it allows, whether its runs need a microVM,
// its quotas, late days, and the ceilings on its assignments' limits and network.
import { api, clearFieldErrors, el, limitFields, limitValues, message } from "../cordon.js";
import { egressRules, egressText, egressWords } from "../format.js";
import { COURSE_LABELS, formRefusal } from "./form_words.js";
import { refused } from "./courses_shared.js";

// The course's policy (instructors).
function lateDaysWords(saved) {
  if (!saved.late_days) return ": no late days";
  const days = (n) => `${n} late day${n === 1 ? "" : "s"}`;
  return `: ${days(saved.late_days)} per student, at most ${saved.late_days_per_assignment} on one assignment`;
}

export async function setUpPolicy(page) {
  const form = document.getElementById("policy-form");
  const [described, site] = await Promise.all([api("GET", "/limits"), api("GET", "/egress")]);
  const course = page.course;  // read after the wait: a join code changed meanwhile replaced it
  const info = Object.fromEntries(described.map((limit) => [limit.name, limit]));
  const runtimes = page.root.dataset.runtimes.split(",").filter(Boolean);
  const allowed = new Set(course.allowed_runtimes || []);
  document.getElementById("policy-runtimes").replaceChildren(...runtimes.map((runtime) =>
    el("label", {}, el("input", { type: "checkbox", name: "allowed_runtimes", value: runtime,
      checked: allowed.has(runtime) }), ` ${runtime}`)));
  document.getElementById("policy-require-vm").checked = Boolean(course.require_vm);
  document.getElementById("policy-concurrent").value = course.quota_concurrent_runs ?? "";
  document.getElementById("policy-per-hour").value = course.quota_runs_per_hour ?? "";
  document.getElementById("policy-late-days").value = course.late_days ?? 0;
  document.getElementById("policy-late-days-each").value = course.late_days_per_assignment ?? 0;
  const limits = document.getElementById("policy-limits");
  limits.replaceChildren(...limitFields(info, course.limits_ceiling || {},
    { prefix: "limits_ceiling", unset: "maximum" }));
  const egress = document.getElementById("policy-egress");
  egress.value = egressText(course.egress_ceiling);
  document.getElementById("policy-egress-site").textContent = egressWords(site.ceiling);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFieldErrors(form);
    const status = document.getElementById("policy-status");
    const changes = {
      allowed_runtimes: [...form.querySelectorAll("input[name=allowed_runtimes]:checked")].map((box) => box.value),
      require_vm: document.getElementById("policy-require-vm").checked,
      limits_ceiling: limitValues(limits),
      egress_ceiling: egressRules(egress.value),
    };
    // A quota left empty is left as it is (a course always has one).
    for (const [name, id] of [["quota_concurrent_runs", "policy-concurrent"],
      ["quota_runs_per_hour", "policy-per-hour"], ["late_days", "policy-late-days"],
      ["late_days_per_assignment", "policy-late-days-each"]]) {
      const value = document.getElementById(id).value;
      if (value !== "") changes[name] = Number(value);
    }
    status.textContent = "saving…";
    try {
      page.course = await api("PATCH", page.base, changes);
      status.textContent = "saved";
      message(`Course policy saved${lateDaysWords(page.course)}.`);
    } catch (error) {
      status.textContent = "not saved";
      const refusal = formRefusal(error, COURSE_LABELS);  // in the form's words
      refused(form, { message: refusal.message, data: { field: refusal.field } }, "Policy not saved");
    }
  });
  document.getElementById("policy-status").textContent = "";
  document.getElementById("policy-save").disabled = false;
}

