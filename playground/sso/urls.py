"""Single sign-on's URLs, under /accounts/oidc/: the start of a sign-in and the provider's return
(the redirect URI registered at the provider: <site>/accounts/oidc/callback/)."""

from django.urls import URLPattern, path

from playground.sso import views

urlpatterns: list[URLPattern] = [
    path("start/", views.start, name="oidc_authentication_init"),
    path("callback/", views.callback, name="oidc_authentication_callback"),
]
