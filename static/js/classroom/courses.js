// The list of courses (templates/classroom/list.html): my courses, pending invitations, joining by
// code, creating a course. A course's own page is course.js.
import { api, clearFieldErrors, el, message } from "../cordon.js";
import { formatWhen } from "../format.js";
import { emptyRow, refused } from "./courses_shared.js";

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
      el("button", { type: "button", class: "primary",
        "aria-label": `accept the invitation to ${invitation.course_title}`, onclick: () => accept(invitation) },
        "Accept"))));
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

const listRoot = document.getElementById("courses-page");
listPage().then(() => { listRoot.dataset.ready = "true"; })
  .catch((error) => message(`this page could not be loaded: ${error.message}`));
