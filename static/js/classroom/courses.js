// The courses pages. The list: my courses, pending invitations, joining by code, creating a
// course. A course: its assignments (a student's scores and attempts); for its staff the gradebook,
// joining, members and invitations, datasets; for its instructors the controls (roles, join code,
// roster import, policy, regrading).
import { api, clearFieldErrors, el, limitFields, limitValues, showFieldError } from "../cordon.js";
import { egressRules, egressText, egressWords, formatBytes, formatScore, formatWhen } from "../format.js";
import { COURSE_LABELS, formRefusal } from "./form_words.js";

function message(text) { document.getElementById("message").textContent = text; }

// A form's failure: beside the field the API named, or in the page's message.
function refused(form, error, what) {
  if (!showFieldError(form, error)) message(`${what}: ${error.message}`);
}

function emptyRow(columns, text) {
  return el("tr", {}, el("td", { colspan: String(columns), class: "muted" }, text));
}

// --- the list of courses ----------------------------------------------------------------------

async function listPage() {
  const tbody = document.querySelector("#course-list tbody");

  async function refresh() {
    const [courses, invitations] = await Promise.all([api("GET", "/courses"), api("GET", "/invitations")]);
    tbody.replaceChildren(...courses.map((course) => el("tr", { "data-id": course.id },
      el("td", {}, el("a", { href: `/courses/${course.id}/` }, course.title)),
      el("td", {}, course.role),
      el("td", {}, String(course.students)))));
    if (!courses.length) tbody.replaceChildren(emptyRow(3, "No courses yet: join one with a code, or create one."));
    document.getElementById("invitations").hidden = !invitations.length;
    document.getElementById("invitation-list").replaceChildren(...invitations.map((invitation) => el("li", {},
      el("strong", {}, invitation.course_title), ` invites you as ${invitation.role} `,
      el("span", { class: "muted" }, `(${formatWhen(invitation.created_at)})`), " ",
      el("button", { type: "button", class: "primary", "aria-label": `accept the invitation to ${invitation.course_title}`,
        onclick: () => accept(invitation) }, "Accept"))));
  }

  async function accept(invitation) {
    try {
      const membership = await api("POST", `/invitations/${invitation.id}/accept`);
      location.assign(`/courses/${membership.course_id}/`);
    } catch (error) { message(`not accepted: ${error.message}`); }
  }

  const joinForm = document.getElementById("join-form");
  joinForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFieldErrors(joinForm);
    try {
      const code = document.getElementById("join-code").value.trim();
      const membership = await api("POST", "/courses/join", { join_code: code });
      location.assign(`/courses/${membership.course_id}/`);
    } catch (error) { refused(joinForm, error, "not joined"); }
  });

  const createForm = document.getElementById("create-form");
  createForm?.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFieldErrors(createForm);
    try {
      const course = await api("POST", "/courses", { title: document.getElementById("course-title").value.trim() });
      location.assign(`/courses/${course.id}/`);
    } catch (error) { refused(createForm, error, "no course created"); }
  });

  await refresh();
}

// --- one course ---------------------------------------------------------------------------------

async function coursePage(root) {
  const courseId = root.dataset.courseId;
  const role = root.dataset.role;
  const staff = role === "instructor" || role === "assistant";
  const instructor = role === "instructor";
  const base = `/courses/${courseId}`;
  let course = await api("GET", base);

  // Assignments: a student's score and attempts; for staff, dates and actions.
  async function loadAssignments() {
    const assignments = await api("GET", `${base}/assignments`);
    const tbody = document.querySelector("#assignments tbody");
    tbody.replaceChildren(...assignments.map((a) => (staff ? staffRow(a) : studentRow(a))));
    if (!assignments.length) tbody.replaceChildren(emptyRow(7, staff ? "No assignments yet." : "No assignments open yet."));
  }

  function due(a) {
    if (!a.due_at) return "no due date";
    const past = new Date(a.due_at) <= new Date();
    return `${formatWhen(a.due_at)}${past ? (a.accept_late ? " (past; late accepted)" : " (past)") : ""}`;
  }

  // A student who has not submitted may have no `my` yet: none used.
  function mine(a) {
    return a.my || (staff ? null : { attempts_used: 0, attempts_left: a.attempts_allowed, score: null });
  }

  function attempts(a) {
    const my = mine(a);
    if (!a.attempts_allowed) return my ? `${my.attempts_used} used (unlimited)` : "unlimited";
    return my ? `${my.attempts_used} used, ${my.attempts_left} left` : `${a.attempts_allowed} allowed`;
  }

  function studentRow(a) {
    const my = a.my;
    let score = formatScore(my ? my.score : null, a.max_score);
    if (my && my.state && my.state !== "graded") score += ` (${my.state.replace("_", " ")})`;
    if (my && my.late) score += " late";
    return el("tr", { "data-id": a.id },
      el("td", {}, el("a", { href: `/assignments/${a.id}/` }, a.title)),
      el("td", {}, a.runtime), el("td", {}, due(a)),
      el("td", { class: "num" }, my && my.submission_id ? el("a", { href: `/submissions/${my.submission_id}/` }, score) : score),
      el("td", {}, attempts(a)));
  }

  function staffRow(a) {
    const actions = el("td", { class: "actions" });
    if (instructor) {
      actions.append(el("a", { class: "button", href: `/assignments/${a.id}/edit/`, "aria-label": `edit ${a.title}` }, "Edit"),
        " ", el("button", { type: "button", "aria-label": `regrade every submission of ${a.title}`,
          onclick: () => regrade(a) }, "Regrade all"));
    }
    const opens = a.opens_at ? formatWhen(a.opens_at) : "open";
    return el("tr", { "data-id": a.id, "data-published": String(a.published) },
      el("td", {}, el("a", { href: `/assignments/${a.id}/` }, a.title),
        a.published ? "" : el("span", { class: "draft-mark" }, " draft")),
      el("td", {}, a.runtime), el("td", {}, due(a)), el("td", {}, opens),
      el("td", { class: "num" }, String(+Number(a.max_score).toFixed(2))),
      el("td", {}, a.attempts_allowed ? String(a.attempts_allowed) : "unlimited"), actions);
  }

  async function regrade(a) {
    if (!confirm(`Regrade every submission of "${a.title}" with its current tests? Scores may change.`)) return;
    try {
      const answer = await api("POST", `/assignments/${a.id}/regrade`);
      message(`${a.title}: regrading ${answer.regrading} submission${answer.regrading === 1 ? "" : "s"}.`);
      loadGradebook();
    } catch (error) { message(`${a.title} not regraded: ${error.message}`); }
  }

  // The gradebook: students × assignments, each cell the latest submission.
  async function loadGradebook() {
    const book = await api("GET", `${base}/gradebook`);
    const grid = document.getElementById("gradebook");
    const head = el("tr", {}, el("th", { scope: "col" }, "Student"),
      ...book.assignments.map((a) => el("th", { scope: "col" }, el("a", { href: `/assignments/${a.id}/` }, a.title),
        el("span", { class: "col-type" }, `of ${+Number(a.max_score).toFixed(2)}${a.published ? "" : " · draft"}`))),
      el("th", { scope: "col", class: "num" }, "Total"));
    const maxTotal = book.assignments.reduce((sum, a) => sum + Number(a.max_score || 0), 0);
    const rows = book.students.map((student) => {
      let total = 0;
      const cells = student.cells.map((cell, index) => {
        const a = book.assignments[index];
        if (!cell) return el("td", { class: "cell-empty muted", "data-assignment": a.id }, "–");
        total += Number(cell.score || 0);
        const score = formatScore(cell.score, a.max_score);
        const facts = [];
        if (cell.state !== "graded") facts.push(cell.state.replace("_", " "));
        if (cell.adjustment) facts.push(`${cell.adjustment > 0 ? "+" : "−"}${+Math.abs(cell.adjustment).toFixed(2)} by hand`);
        if (cell.late) facts.push("late");
        if (cell.late_days) facts.push(`${cell.late_days} late day${cell.late_days === 1 ? "" : "s"}`);
        const record = `/courses/${course.id}/students/${encodeURIComponent(student.username)}/#assignment-${a.id}`;
        return el("td", { class: `cell state-${cell.state}`, "data-assignment": a.id },
          el("a", { href: `/submissions/${cell.submission_id}/`, "aria-label": `${student.username}, ${a.title}: ${score}` },
            score),
          el("span", { class: "cell-facts" }, [...facts, ""].join(" · "),
            el("a", { href: record, class: "attempts-link" }, `${cell.attempts} attempt${cell.attempts === 1 ? "" : "s"}`)));
      });
      const who = el("a", { href: `/courses/${course.id}/students/${encodeURIComponent(student.username)}/` }, student.username);
      return el("tr", { "data-student": student.username }, el("th", { scope: "row" }, who), ...cells,
        el("td", { class: "num" }, formatScore(total, maxTotal)));
    });
    grid.replaceChildren(el("thead", {}, head),
      el("tbody", {}, ...(rows.length ? rows : [emptyRow(book.assignments.length + 2, "No students yet.")])));
  }

  // Joining by code or link.
  function renderJoin() {
    const box = document.getElementById("join-info");
    if (!course.join_code) {
      box.replaceChildren(el("p", {}, "Joining by code is closed.", instructor ? " Rotate the code to open it again." : ""));
    } else {
      const link = `${location.origin}/courses/join/${encodeURIComponent(course.join_code)}/`;
      box.replaceChildren(
        el("p", {}, "Join code: ", el("code", { id: "join-code", class: "join-code" }, course.join_code)),
        el("p", {}, "Join link: ", el("a", { id: "join-link", href: link }, link)));
    }
    const close = document.getElementById("close-code");
    if (close) close.disabled = !course.join_code;
  }

  async function joinCode(action) {
    if (action === "rotate" && course.join_code && !confirm("Make a new join code? The current code and link stop working.")) return;
    try {
      course = await api("POST", `${base}/join-code`, { action });
      renderJoin();
      message(action === "rotate" ? "A new join code: the old one no longer works." : "Joining by code is closed.");
    } catch (error) { message(`join code not changed: ${error.message}`); }
  }

  // Members and invitations.
  async function loadMembers() {
    const members = await api("GET", `${base}/members`);
    const tbody = document.querySelector("#members tbody");
    tbody.replaceChildren(...members.map((m) => {
      const row = el("tr", { "data-username": m.username }, el("td", {}, m.username), el("td", {}, m.email || ""));
      if (instructor) {
        const select = el("select", { "aria-label": `role of ${m.username}` },
          ...["student", "assistant", "instructor"].map((r) => el("option", { value: r }, r)));
        select.value = m.role;
        select.addEventListener("change", () => setRole(m, select));
        row.append(el("td", {}, select), el("td", {}, formatWhen(m.joined_at)),
          el("td", {}, el("button", { type: "button", class: "danger", "aria-label": `remove ${m.username}`,
            onclick: () => removeMember(m) }, "Remove")));
      } else row.append(el("td", {}, m.role), el("td", {}, formatWhen(m.joined_at)));
      return row;
    }));
  }

  async function setRole(member, select) {
    try {
      await api("PATCH", `${base}/members/${encodeURIComponent(member.username)}`, { role: select.value });
      member.role = select.value;
      message(`${member.username} is now ${select.value}.`);
      loadGradebook();
    } catch (error) {
      select.value = member.role;
      message(`role not changed: ${error.message}`);
    }
  }

  async function removeMember(member) {
    if (!confirm(`Remove ${member.username} from this course? Their submissions stay.`)) return;
    try {
      await api("DELETE", `${base}/members/${encodeURIComponent(member.username)}`);
      message(`${member.username} removed.`);
      loadMembers();
      loadGradebook();
    } catch (error) { message(`${member.username} not removed: ${error.message}`); }
  }

  async function loadInvitations() {
    const invitations = await api("GET", `${base}/invitations`);
    const tbody = document.querySelector("#course-invitations tbody");
    tbody.replaceChildren(...invitations.map((i) => el("tr", {},
      el("td", {}, i.identifier), el("td", {}, i.role), el("td", {}, formatWhen(i.created_at)),
      el("td", {}, i.accepted_at ? `by ${i.accepted_by || "?"}, ${formatWhen(i.accepted_at)}` : "pending"))));
    if (!invitations.length) tbody.replaceChildren(emptyRow(4, "No invitations: import a roster to invite people by name."));
  }

  function setUpRoster() {
    const form = document.getElementById("roster-form");
    const result = document.getElementById("roster-result");
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      clearFieldErrors(form);
      const file = document.getElementById("roster-file").files[0];
      if (!file) return;
      const data = new FormData();
      data.append("file", file);
      result.textContent = "importing…";
      try {
        const counts = await api("POST", `${base}/roster`, data);
        const invalid = counts.invalid.length ? ` · not understood: ${counts.invalid.join("; ")}` : "";
        result.textContent = `Invited ${counts.invited} · already members ${counts.already_members} · ` +
          `already invited ${counts.already_invited}${invalid}`;
        form.reset();
        loadInvitations();
      } catch (error) {
        result.textContent = "";
        refused(form, error, "roster not imported");
      }
    });
    document.getElementById("roster-import").disabled = false;
  }

  // Course datasets.
  async function loadDatasets() {
    const datasets = await api("GET", `${base}/datasets`);
    const tbody = document.querySelector("#course-datasets tbody");
    tbody.replaceChildren(...datasets.map((d) => el("tr", {},
      el("td", {}, d.name), el("td", {}, formatBytes(d.size)), el("td", {}, d.sniffed_type), el("td", {}, formatWhen(d.created_at)),
      el("td", {}, d.can_delete ? el("button", { type: "button", class: "danger", "aria-label": `delete ${d.name}`,
        onclick: () => deleteDataset(d) }, "Delete") : ""))));
    if (!datasets.length) tbody.replaceChildren(emptyRow(5, "No course datasets."));
  }

  async function deleteDataset(dataset) {
    if (!confirm(`Delete ${dataset.name}? Assignments that attach it will no longer have it.`)) return;
    const status = document.getElementById("dataset-status");
    try {
      await api("DELETE", `${base}/datasets/${dataset.id}`);
      status.textContent = `deleted ${dataset.name}`;
    } catch (error) { status.textContent = `${dataset.name} not deleted: ${error.message}`; }
    loadDatasets();
  }

  function setUpDatasetUpload() {
    const picker = document.getElementById("dataset-file");
    const status = document.getElementById("dataset-status");
    // A name the course has already is refused; the status then offers to replace it (the
    // assignments that use it read the new file; runs made before keep theirs).
    async function send(files, replace) {
      const taken = [];
      for (const file of files) {
        const data = new FormData();
        data.append("file", file);
        status.textContent = `uploading ${file.name}…`;
        try {
          await api("POST", `${base}/datasets${replace ? "?replace=true" : ""}`, data);
          status.textContent = `${replace ? "replaced" : "uploaded"} ${file.name}`;
        } catch (error) {
          if (error.data && error.data.code === "duplicate_name") taken.push(file);
          else status.textContent = `${file.name}: ${error.message}`;
        }
      }
      if (taken.length) {
        const names = taken.map((file) => file.name).join(", ");
        status.replaceChildren(`The course has ${names} already. `,
          el("button", { type: "button", onclick: () => send(taken, true) }, `Replace ${names}`),
          " (its assignments read the new file; runs made before keep theirs)");
      }
      loadDatasets();
    }
    picker.addEventListener("change", () => {
      const files = [...picker.files];
      picker.value = "";
      send(files, false);
    });
  }

  // The course's policy (instructors).
  function lateDaysWords(saved) {
    if (!saved.late_days) return ": no late days";
    const days = (n) => `${n} late day${n === 1 ? "" : "s"}`;
    return `: ${days(saved.late_days)} per student, at most ${saved.late_days_per_assignment} on one assignment`;
  }

  async function setUpPolicy() {
    const form = document.getElementById("policy-form");
    const [described, site] = await Promise.all([api("GET", "/limits"), api("GET", "/egress")]);
    const info = Object.fromEntries(described.map((limit) => [limit.name, limit]));
    const runtimes = root.dataset.runtimes.split(",").filter(Boolean);
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
    limits.replaceChildren(...limitFields(info, course.limits_ceiling || {}, { prefix: "limits_ceiling", unset: "maximum" }));
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
      for (const [name, id] of [["quota_concurrent_runs", "policy-concurrent"], ["quota_runs_per_hour", "policy-per-hour"],
        ["late_days", "policy-late-days"], ["late_days_per_assignment", "policy-late-days-each"]]) {
        const value = document.getElementById(id).value;
        if (value !== "") changes[name] = Number(value);
      }
      status.textContent = "saving…";
      try {
        course = await api("PATCH", base, changes);
        status.textContent = "saved";
        message(`Course policy saved${lateDaysWords(course)}.`);
      } catch (error) {
        status.textContent = "not saved";
        const refusal = formRefusal(error, COURSE_LABELS);  // in the form's words
        refused(form, { message: refusal.message, data: { field: refusal.field } }, "Policy not saved");
      }
    });
    document.getElementById("policy-status").textContent = "";
    document.getElementById("policy-save").disabled = false;
  }

  const work = [loadAssignments()];
  if (staff) {
    renderJoin();
    work.push(loadGradebook(), loadMembers(), loadInvitations(), loadDatasets());
    setUpDatasetUpload();
  }
  if (instructor) {
    document.getElementById("rotate-code").addEventListener("click", () => joinCode("rotate"));
    document.getElementById("close-code").addEventListener("click", () => joinCode("close"));
    setUpRoster();
    work.push(setUpPolicy());
  }
  await Promise.all(work);
}

const listRoot = document.getElementById("courses-page");
const courseRoot = document.getElementById("course");
const page = listRoot ? listPage() : coursePage(courseRoot);
page.then(() => { (listRoot || courseRoot).dataset.ready = "true"; })
  .catch((error) => message(`this page could not be loaded: ${error.message}`));
