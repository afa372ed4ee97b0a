// Who is in a course (its staff's part of the page): joining by code or link, the members and
// their roles, the invitations, and a roster imported to invite people by name.
import { api, clearFieldErrors, el, message } from "../cordon.js";
import { formatWhen } from "../format.js";
import { loadGradebook } from "./course_gradebook.js";
import { emptyRow, refused } from "./courses_shared.js";

// Joining by code or link.
export function renderJoin(page) {
  const box = document.getElementById("join-info");
  if (!page.course.join_code) {
    box.replaceChildren(el("p", {}, "Joining by code is closed.",
      page.instructor ? " Rotate the code to open it again." : ""));
  } else {
    const link = `${location.origin}/courses/join/${encodeURIComponent(page.course.join_code)}/`;
    box.replaceChildren(
      el("p", {}, "Join code: ", el("code", { id: "join-code", class: "join-code" }, page.course.join_code)),
      el("p", {}, "Join link: ", el("a", { id: "join-link", href: link }, link)));
  }
  const close = document.getElementById("close-code");
  if (close) close.disabled = !page.course.join_code;
}

export async function joinCode(page, action) {
  if (action === "rotate" && page.course.join_code
    && !confirm("Make a new join code? The current code and link stop working.")) return;
  try {
    page.course = await api("POST", `${page.base}/join-code`, { action });
    renderJoin(page);
    message(action === "rotate" ? "A new join code: the old one no longer works." : "Joining by code is closed.");
  } catch (error) { message(`join code not changed: ${error.message}`); }
}

// Members and invitations.
export async function loadMembers(page) {
  const members = await api("GET", `${page.base}/members`);
  const tbody = document.querySelector("#members tbody");
  tbody.replaceChildren(...members.map((m) => {
    const row = el("tr", { "data-username": m.username }, el("td", {}, m.username), el("td", {}, m.email || ""));
    if (page.instructor) {
      const select = el("select", { "aria-label": `role of ${m.username}` },
        ...["student", "assistant", "instructor"].map((r) => el("option", { value: r }, r)));
      select.value = m.role;
      select.addEventListener("change", () => setRole(page, m, select));
      row.append(el("td", {}, select), el("td", {}, formatWhen(m.joined_at)),
        el("td", {}, el("button", { type: "button", class: "danger", "aria-label": `remove ${m.username}`,
          onclick: () => removeMember(page, m) }, "Remove")));
    } else row.append(el("td", {}, m.role), el("td", {}, formatWhen(m.joined_at)));
    return row;
  }));
}

async function setRole(page, member, select) {
  try {
    await api("PATCH", `${page.base}/members/${encodeURIComponent(member.username)}`, { role: select.value });
    member.role = select.value;
    message(`${member.username} is now ${select.value}.`);
    loadGradebook(page);
  } catch (error) {
    select.value = member.role;
    message(`role not changed: ${error.message}`);
  }
}

async function removeMember(page, member) {
  if (!confirm(`Remove ${member.username} from this course? Their submissions stay.`)) return;
  try {
    await api("DELETE", `${page.base}/members/${encodeURIComponent(member.username)}`);
    message(`${member.username} removed.`);
    loadMembers(page);
    loadGradebook(page);
  } catch (error) { message(`${member.username} not removed: ${error.message}`); }
}

export async function loadInvitations(page) {
  const invitations = await api("GET", `${page.base}/invitations`);
  const tbody = document.querySelector("#course-invitations tbody");
  tbody.replaceChildren(...invitations.map((i) => el("tr", {},
    el("td", {}, i.identifier), el("td", {}, i.role), el("td", {}, formatWhen(i.created_at)),
    el("td", {}, i.accepted_at ? `by ${i.accepted_by || "?"}, ${formatWhen(i.accepted_at)}` : "pending"))));
  if (!invitations.length) {
    tbody.replaceChildren(emptyRow(4, "No invitations: import a roster to invite people by name."));
  }
}

export function setUpRoster(page) {
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
      const counts = await api("POST", `${page.base}/roster`, data);
      const invalid = counts.invalid.length ? ` · not understood: ${counts.invalid.join("; ")}` : "";
      result.textContent = `Invited ${counts.invited} · already members ${counts.already_members} · ` +
        `already invited ${counts.already_invited}${invalid}`;
      form.reset();
      loadInvitations(page);
    } catch (error) {
      result.textContent = "";
      refused(form, error, "roster not imported");
    }
  });
  document.getElementById("roster-import").disabled = false;
}
