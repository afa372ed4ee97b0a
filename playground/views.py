"""Pages. Thin: they call selectors and services and render templates."""

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render


def home(request: HttpRequest) -> HttpResponse:
    return render(request, "home.html", {"signup": settings.CORDON_SIGNUP})


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
