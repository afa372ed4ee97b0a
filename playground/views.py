"""Pages. Thin: they call selectors and services and render templates."""

import logging
from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth import login, update_session_auth_hash
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import PasswordChangeForm, UserCreationForm
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST
from django.views.generic import RedirectView
from prometheus_client import CONTENT_TYPE_LATEST

from playground import throttle
from playground.environments import environments
from playground.forms import InviteForm, TokenForm
from playground.metrics import scrape
from playground.selectors.accounts import invite_list, token_list_for_user
from playground.selectors.images import image_list_built
from playground.selectors.notebooks import notebook_get_for_user
from playground.selectors.runs import run_egress_view, run_get_for_viewer, run_history_for_user
from playground.services import notebooks as notebook_services
from playground.services.accounts import token_create, token_revoke, token_user
from playground.services.audit import record_staff_access
from playground.services.invites import InviteInvalid, invite_check, invite_create, invite_redeem, invite_revoke
from playground.signed_in import signed_in
from playground.sso.config import password_login, sso_config
from runner.spec import RUNTIMES

log = logging.getLogger(__name__)


def home(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        return redirect("playground")
    return render(request, "home.html", {"signup": _signup_open()})


@login_required
def playground(request: HttpRequest) -> HttpResponse:
    """The user's most recently changed notebook (a first one is made for a new user)."""
    notebook = notebook_services.notebook_default(user=signed_in(request))
    return redirect("notebook", notebook_id=notebook.id)


@login_required
def notebook(request: HttpRequest, notebook_id: UUID) -> HttpResponse:
    found = notebook_get_for_user(user=signed_in(request), notebook_id=notebook_id)
    choices = [e for e in environments().values() if e.name not in RUNTIMES]  # a runtime's own is the default
    return render(request, "playground.html", {"notebook": found, "environments": choices})


@login_required
def datasets(request: HttpRequest) -> HttpResponse:
    return render(request, "datasets.html")


@login_required
def runs(request: HttpRequest) -> HttpResponse:
    history = run_history_for_user(user=signed_in(request))
    return render(request, "runs.html", {"runs": history})


@login_required
def run_detail(request: HttpRequest, run_id: UUID) -> HttpResponse:
    """The run's page, for its owner or for staff (any run; each staff view is recorded)."""
    run = run_get_for_viewer(user=signed_in(request), run_id=run_id)
    record_staff_access(viewer=request.user, owner=run.owner, what="run page", run=run, path=request.get_full_path())
    context = {"run": run, "viewed_as_staff": run.owner_id != request.user.pk, "egress": run_egress_view(run=run)}
    return render(request, "run_detail.html", context)


@login_required
def images(request: HttpRequest) -> HttpResponse:
    return render(request, "images.html", {"images": image_list_built(request.user)})


# --- accounts: log-in, sign-up (open, or by invite), the account page, invites ---------------------


def _signup_open() -> bool:
    return bool(settings.CORDON_SIGNUP) and password_login()


def _sso_name() -> str:
    config = sso_config()
    return config.provider_name if config else ""


class LoginPage(auth_views.LoginView):
    """Django's log-in view, telling the page whether visitors may sign up themselves and how they
    sign in: a password, single sign-on, or both. With passwords off, a POSTed one is refused."""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        return {**context, "signup": _signup_open(), "sso": _sso_name(), "password_login": password_login()}

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if password_login():
            return super().post(request, *args, **kwargs)
        log.warning("login: a password was posted from %s; passwords are off", throttle.client_address(request))
        context = self.get_context_data(refused=f"This site does not take passwords: sign in with {_sso_name()}.")
        return self.render_to_response(context, status=403)


def admin_login(request: HttpRequest) -> HttpResponseBase:
    """The audit console's log-in: Django's form where passwords are all there is, else the site's
    log-in page (which offers single sign-on), coming back to the console."""
    if sso_config() is None:
        return admin.site.login(request)
    target = request.GET.get("next") or reverse("admin:index")
    return redirect(reverse("login") + "?" + urlencode({"next": target}))


class Favicon(RedirectView):
    """/favicon.ico, which browsers ask for on pages that do not name an icon: the site's SVG."""

    def get_redirect_url(self, *args: Any, **kwargs: Any) -> str:
        return static("favicon.svg")


def signup(request: HttpRequest) -> HttpResponse:
    """Sign-up: with an invite link (?invite=<key>) always, without one only where the operator
    allows it (CORDON_SIGNUP)."""
    if not password_login():  # accounts are made at the first sign-in, invite or not
        return render(request, "registration/signup_closed.html", {"sso": _sso_name()}, status=404)
    key = request.GET.get("invite", "")
    if key:
        return _signup_with_invite(request, key)
    if not settings.CORDON_SIGNUP:
        return render(request, "registration/signup_closed.html", status=404)
    form: UserCreationForm[User] = UserCreationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user)
        return redirect("home")
    return render(request, "registration/signup.html", {"form": form, "signup": True})


def _signup_with_invite(request: HttpRequest, key: str) -> HttpResponse:
    # An unknown key counts as a failed authentication against the address, like a bad token: keys
    # are unguessable, but probing for them should cost what probing for passwords does.
    subjects = [throttle.address_subject(throttle.client_address(request))]
    wait_s = throttle.retry_after_s(subjects)
    if wait_s is not None:
        return _throttled(request, wait_s)
    try:
        invite_check(key=key)
    except InviteInvalid as exc:
        if exc.code == "unknown":
            throttle.record_failure(subjects)
        return _invite_invalid(request, exc)
    form: UserCreationForm[User] = UserCreationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save(commit=False)  # the password hashed here, outside the transaction
        try:
            invite_redeem(key=key, user=user)
        except InviteInvalid as exc:
            return _invite_invalid(request, exc)
        except IntegrityError:  # the name was taken between the form's check and the insert
            form.add_error("username", "A user with that username already exists.")
        else:
            login(request, user)
            return redirect("home")
    return render(request, "registration/signup.html", {"form": form, "invite_key": key})


def _invite_invalid(request: HttpRequest, exc: InviteInvalid) -> HttpResponse:
    status = 404 if exc.code == "unknown" else 410
    return render(request, "registration/invite_invalid.html", {"message": exc.message}, status=status)


def _throttled(request: HttpRequest, wait_s: int) -> HttpResponse:
    wait = f"{wait_s} seconds" if wait_s < 120 else f"{-(-wait_s // 60)} minutes"
    response = render(
        request, "registration/throttled.html", {"wait": wait, "heading": "Too many failed attempts"}, status=429
    )
    response["Retry-After"] = str(wait_s)
    return response


def staff_required(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Staff who may create accounts (auth.add_user; every superuser): an invite makes one."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not (request.user.is_staff and request.user.has_perm("auth.add_user")):
            raise PermissionDenied("only staff who may create accounts can make invite links")
        return view(request, *args, **kwargs)

    return login_required(wrapped)


@login_required
def account(request: HttpRequest) -> HttpResponse:
    return _account_page(request, PasswordChangeForm(request.user))


def _account_page(request: HttpRequest, password_form: PasswordChangeForm, status: int = 200) -> HttpResponse:
    # Django's form focuses the old password on load; on this page it would scroll past the tokens.
    password_form.fields["old_password"].widget.attrs.pop("autofocus", None)
    tokens = token_list_for_user(user=signed_in(request))
    context = {"tokens": tokens, "token_form": TokenForm(), "password_form": password_form,
               "has_password": _has_password(request)}  # fmt: skip
    return render(request, "account.html", context, status=status)


@never_cache  # the page carries a key shown once: no cache may keep it
@require_POST
@login_required
def token_new(request: HttpRequest) -> HttpResponse:
    form = TokenForm(request.POST)
    if not form.is_valid():
        messages.error(request, "A token's name is at most 64 characters.")
        return redirect("account")
    name = form.cleaned_data["name"]
    key = token_create(user=signed_in(request), name=name)
    return render(request, "account_token.html", {"key": key, "name": name})


@require_POST
@login_required
def token_delete(request: HttpRequest, token_id: int) -> HttpResponse:
    if not token_revoke(user=signed_in(request), token_id=token_id):
        raise Http404("you have no token with that id")
    messages.success(request, "Token revoked: clients using it now get 401.")
    return redirect("account")


@require_POST
@login_required
def password_change(request: HttpRequest) -> HttpResponse:
    if not _has_password(request):
        raise PermissionDenied("this account signs in with single sign-on, without a password here")
    # A wrong current password counts against the account and the address like a failed log-in, so
    # that a session left open does not let someone try passwords without limit.
    subjects = [
        throttle.address_subject(throttle.client_address(request)),
        throttle.account_subject(request.user.get_username()),
    ]
    wait_s = throttle.retry_after_s(subjects)
    if wait_s is not None:
        return _throttled(request, wait_s)
    form = PasswordChangeForm(request.user, request.POST)
    if form.is_valid():
        user = form.save()
        update_session_auth_hash(request, user)  # this session stays logged in; others are logged out
        messages.success(request, "Password changed.")
        return redirect("account")
    if "old_password" in form.errors:
        throttle.record_failure(subjects)
    return _account_page(request, form, status=400)


def _has_password(request: HttpRequest) -> bool:
    # An account made by single sign-on has none; with passwords off, nobody's counts.
    user = request.user
    return password_login() and user.is_authenticated and user.has_usable_password()


@staff_required
def invites(request: HttpRequest) -> HttpResponse:
    return _invites_page(request, InviteForm())


def _invites_page(request: HttpRequest, form: InviteForm, status: int = 200) -> HttpResponse:
    context = {"form": form, "invites": invite_list(), "signup_open": settings.CORDON_SIGNUP}
    return render(request, "account_invites.html", context, status=status)


@never_cache
@require_POST
@staff_required
def invite_new(request: HttpRequest) -> HttpResponse:
    form = InviteForm(request.POST)
    if not form.is_valid():
        return _invites_page(request, form, status=400)
    key = invite_create(by=signed_in(request), **form.cleaned_data)
    link = request.build_absolute_uri(reverse("signup") + "?invite=" + key)
    context = {"link": link, "note": form.cleaned_data["note"], "days": form.cleaned_data["lifetime_days"]}
    return render(request, "account_invite_link.html", context)


@require_POST
@staff_required
def invite_delete(request: HttpRequest, invite_id: int) -> HttpResponse:
    if not invite_revoke(invite_id=invite_id):
        raise Http404("no unused invite with that id")
    messages.success(request, "Invite revoked: its link no longer works.")
    return redirect("invites")


@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus's scrape: to a bearer token of a staff account with the view_metrics permission
    (a superuser has it), never to anyone else. Unknown tokens count against the address as the
    API's do."""
    if request.method != "GET":
        return HttpResponse(status=405, headers={"Allow": "GET"})
    try:
        throttle.check_token_address(request)
    except throttle.AuthThrottled as exc:
        return HttpResponse(
            exc.message, status=429, content_type="text/plain", headers={"Retry-After": str(exc.retry_after_s)}
        )
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    user = token_user(token=token.strip()) if scheme.lower() == "bearer" and token.strip() else None
    if user is None:
        if token:
            throttle.token_failed(request)
        return HttpResponse(
            "a bearer token is needed\n", status=401, content_type="text/plain", headers={"WWW-Authenticate": "Bearer"}
        )
    if not (user.is_staff and user.has_perm("playground.view_metrics")):
        return HttpResponse("this token's account may not read the metrics\n", status=403, content_type="text/plain")
    return HttpResponse(scrape(), content_type=CONTENT_TYPE_LATEST)
