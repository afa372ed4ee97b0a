"""Pages. Thin: they call selectors and services and render templates."""

from uuid import UUID

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from playground.selectors.images import image_list_built
from playground.selectors.notebooks import notebook_get_for_user
from playground.selectors.runs import run_get_for_user, run_list_for_user
from playground.services import notebooks as notebook_services


def home(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        return redirect("playground")
    return render(request, "home.html", {"signup": settings.CORDON_SIGNUP})


@login_required
def playground(request: HttpRequest) -> HttpResponse:
    """The user's most recently changed notebook (a first one is made for a new user)."""
    notebook = notebook_services.notebook_default(user=request.user)  # type: ignore[arg-type]
    return redirect("notebook", notebook_id=notebook.id)


@login_required
def notebook(request: HttpRequest, notebook_id: UUID) -> HttpResponse:
    found = notebook_get_for_user(user=request.user, notebook_id=notebook_id)  # type: ignore[arg-type]
    return render(request, "playground.html", {"notebook": found})


@login_required
def datasets(request: HttpRequest) -> HttpResponse:
    return render(request, "datasets.html")


@login_required
def runs(request: HttpRequest) -> HttpResponse:
    history = run_list_for_user(user=request.user)[:200]  # type: ignore[arg-type]
    return render(request, "runs.html", {"runs": history})


@login_required
def run_detail(request: HttpRequest, run_id: UUID) -> HttpResponse:
    run = run_get_for_user(user=request.user, run_id=run_id)  # type: ignore[arg-type]
    return render(request, "run_detail.html", {"run": run})


@login_required
def images(request: HttpRequest) -> HttpResponse:
    return render(request, "images.html", {"images": image_list_built()})


def signup(request: HttpRequest) -> HttpResponse:
    """Self sign-up, only where the operator allows it (CORDON_SIGNUP)."""
    if not settings.CORDON_SIGNUP:
        raise Http404("sign-up is closed on this site")
    form: UserCreationForm[User] = UserCreationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user)
        return redirect("home")
    return render(request, "registration/signup.html", {"form": form})
