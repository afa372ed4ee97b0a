"""LTI's endpoints: the OIDC login and the launch (the two the LMS posts to), the tool's JWKS, the
Deep Linking picker's pick (posted from the LMS's frame), and the instructor's LMS page (roster sync,
the scores sent back and those that could not be, with "send again"). Those three are the only
CSRF-exempt ones, and the picker's pages the only framable ones (by the launching LMS). Refusals are
plain pages with a short reason and a 400 or 403, logged, and with nobody logged in."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from playground.classroom.selectors import assignment_for_member, course_for_staff
from playground.lti import deep_linking, framing, keys, selectors, tasks
from playground.lti.launch import (
    DEEP_LINKING_REQUEST,
    DEEP_LINKING_SETTINGS,
    Accepted,
    Launch,
    NotSetUp,
    Refused,
    launch_accept,
    launch_validate,
    oidc_redirect,
)
from playground.lti.models import ContextLink, PassbackState
from playground.lti.passback import passback_resend, passbacks_of
from playground.lti.roster import RosterError, roster_sync
from playground.models import Assignment, Course

log = logging.getLogger(__name__)

BACKEND = "django.contrib.auth.backends.ModelBackend"
PASSBACKS_SHOWN = 200


def _refused(request: HttpRequest, refusal: Refused, where: str) -> HttpResponse:
    log.warning("lti: %s refused (%s): %s", where, refusal.status, refusal.reason)
    return render(request, "lti/refused.html", {"reason": refusal.reason}, status=refusal.status)


@csrf_exempt  # posted (or linked) by the LMS: no CSRF token can come with it
@require_http_methods(["GET", "POST"])
def oidc_login(request: HttpRequest) -> HttpResponse:
    try:
        return oidc_redirect(request=request, launch_url=request.build_absolute_uri(reverse("lti:launch")))  # type: ignore[no-any-return]
    except Refused as refusal:
        return _refused(request, refusal, "login")


@csrf_exempt  # posted by the LMS's page; the state cookie, the nonce and the signature protect it
@require_POST
def launch(request: HttpRequest) -> HttpResponse:
    try:
        checked = launch_validate(request=request)
        accepted = launch_accept(launch=checked)
    except Refused as refusal:
        return _refused(request, refusal, "launch")
    except NotSetUp:
        log.info("lti: a launch from a context with no course yet (%s)", request.POST.get("state", "")[:20])
        return render(request, "lti/not_set_up.html", status=200)
    if checked.message_type == DEEP_LINKING_REQUEST:
        return _pick_start(request, accepted, checked)
    login(request, accepted.user, backend=BACKEND)
    link = accepted.resource_link
    assignment, _ = assignment_for_member(user=accepted.user, assignment_id=link.assignment_id if link else None)
    return redirect("assignment", assignment_id=assignment.id)


def _pick_start(request: HttpRequest, accepted: Accepted, checked: Launch) -> HttpResponse:
    """The picker itself, answering the launch (no redirect: in the LMS's frame no cookie would
    follow it), with the signed token its form posts back."""
    settings = checked.data.get(DEEP_LINKING_SETTINGS)
    if not isinstance(settings, dict) or not framing.origin_of(str(settings.get("deep_link_return_url") or "")):
        return _refused(request, Refused("the deep linking request carries no http(s) return URL", 400), "launch")
    # Logged in for Cordon's other pages when the picker is a window; in a frame the cookie is dropped.
    login(request, accepted.user, backend=BACKEND)
    token = deep_linking.pick_token_make(
        platform=checked.platform, deployment_id=checked.deployment_id, settings=settings, context=accepted.context,
        user=accepted.user,
    )  # fmt: skip
    origins = framing.lms_origins(platform=checked.platform, return_url=str(settings["deep_link_return_url"]))
    return _picker(request, accepted.context, accepted.course, token, origins)


def _picker(
    request: HttpRequest, context: ContextLink, course: Course, token: str, origins: list[str], error: str = ""
) -> HttpResponse:
    assignments = selectors.assignments_for_picker(course)
    response = render(request, "lti/pick.html", {"course": course, "assignments": assignments, "token": token,
                      "platform": context.platform, "error": error}, status=422 if error else 200)  # fmt: skip
    return framing.framable(response, origins=origins)


@csrf_exempt  # posted from the picker in the LMS's frame, where no cookie comes: the token authorises it
@require_POST
def deep_link(request: HttpRequest) -> HttpResponse:
    """The pick: answered with the signed deep-linking JWT, auto-posted back to the LMS, for the
    holder of a valid picker token who still instructs the course."""
    token = request.POST.get("token", "")
    try:
        ticket = deep_linking.pick_token_read(token=token)
        context, course, user = deep_linking.pick_scope(ticket=ticket)
    except Refused as refusal:
        return _refused(request, refusal, "deep link")
    origins = framing.lms_origins(platform=context.platform, return_url=ticket.return_url)
    chosen = next(
        (a for a in selectors.assignments_for_picker(course) if str(a.id) == request.POST.get("assignment")), None
    )
    if chosen is None:  # the token is not used up: the same picker may still pick
        return _picker(request, context, course, token, origins, error="Choose one of the assignments.")
    try:
        deep_linking.pick_token_use(ticket=ticket)
    except Refused as refusal:
        return _refused(request, refusal, "deep link")
    answer = deep_linking.deep_link_answer(
        platform=context.platform, deployment_id=ticket.deployment_id, settings=ticket.settings,
        assignment=chosen, launch_url=request.build_absolute_uri(reverse("lti:launch")),
        max_score=float(getattr(chosen, "points", 0) or 0),
    )  # fmt: skip
    log.info("lti: %s placed assignment %s in %s", user, chosen.id, context)
    return _auto_post(request, answer.return_url, {"JWT": answer.jwt}, chosen, origins)


def _auto_post(
    request: HttpRequest, url: str, fields: dict[str, str], assignment: Assignment, origins: list[str]
) -> HttpResponse:
    """A form to the LMS, submitted by a script of ours: the page's CSP lets forms go to that
    origin, and to no other."""
    origin = framing.origin_of(url)
    if origin is None:
        return _refused(request, Refused("the deep linking return URL is not an http(s) URL", 400), "deep link")
    response = render(request, "lti/auto_post.html", {"url": url, "fields": fields, "assignment": assignment})
    return framing.framable(response, origins=origins, form_to=[origin])


@require_GET
def jwks(request: HttpRequest) -> JsonResponse:
    response = JsonResponse(keys.jwks())
    response["Cache-Control"] = "public, max-age=300"
    return response


@login_required
@require_GET
def course_page(request: HttpRequest, course_id: Any) -> HttpResponse:
    course, _ = course_for_staff(user=request.user, course_id=course_id, instructor=True)
    contexts = selectors.contexts_of(course)
    passbacks = list(passbacks_of(course)[:PASSBACKS_SHOWN])
    failed = sum(1 for p in passbacks if p.state == PassbackState.FAILED)
    return render(request, "lti/course.html", {"course": course, "contexts": contexts, "passbacks": passbacks,
                                               "failed": failed, "is_instructor": True})  # fmt: skip


@login_required
@require_POST
def course_roster_sync(request: HttpRequest, course_id: Any) -> HttpResponse:
    course, _ = course_for_staff(user=request.user, course_id=course_id, instructor=True)
    contexts = selectors.roster_contexts_of(course)
    if not contexts:
        messages.error(request, "No LMS launch of this course carried a roster service: launch it from the LMS first.")
    for context in contexts:
        try:
            result = roster_sync(context=context)
            messages.success(request, f"{context.platform}: {result.words()}.")
        except RosterError as exc:
            messages.error(request, f"{context.platform}: {exc}.")
    return redirect("lti:course", course_id=course.id)


@login_required
@require_POST
def passback_send_again(request: HttpRequest, passback_id: int) -> HttpResponse:
    row = selectors.passback_get(passback_id)
    course, _ = course_for_staff(
        user=request.user, course_id=row.line_item.resource_link.context.course_id, instructor=True
    )
    if passback_resend(passback=row):
        tasks.enqueue_passback(row.id)
        messages.success(request, "The score is being sent again.")
    else:
        messages.info(request, "That score is not a failed one: nothing to send again.")
    return redirect("lti:course", course_id=course.id)
