"""LTI's URLs, under /lti/: what an LMS is told (login, launch, JWKS) and the instructor's pages."""

from django.urls import URLPattern, path

from playground.lti import views

app_name = "lti"
urlpatterns: list[URLPattern] = [
    path("login/", views.oidc_login, name="login"),
    path("launch/", views.launch, name="launch"),
    path("jwks/", views.jwks, name="jwks"),
    path("deep-link/", views.deep_link, name="deep_link"),
    path("courses/<uuid:course_id>/", views.course_page, name="course"),
    path("courses/<uuid:course_id>/roster-sync", views.course_roster_sync, name="roster_sync"),
    path("passbacks/<int:passback_id>/send-again", views.passback_send_again, name="send_again"),
]
