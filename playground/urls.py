from django.contrib import admin
from django.urls import include, path

from playground import views
from playground.api import ROUTERS, api
from playground.classroom import views as classroom_views
from playground.classroom.api import router as classroom_router
from playground.sso import views as sso_views
from playground.throttle import throttled_login

# The site's API: its own domains' routers (playground.api), then the classroom's, in that order.
for router in (*ROUTERS, classroom_router):
    api.add_router("/", router)

__all__ = ["api", "urlpatterns"]  # api: the site's whole API, every router mounted

urlpatterns = [
    path("", views.home, name="home"),
    path("playground/", views.playground, name="playground"),
    path("notebooks/<uuid:notebook_id>/", views.notebook, name="notebook"),
    path("datasets/", views.datasets, name="datasets"),
    path("runs/", views.runs, name="runs"),
    path("runs/<uuid:run_id>/", views.run_detail, name="run_detail"),
    path("images/", views.images, name="images"),
    path("courses/", classroom_views.courses, name="courses"),
    path("courses/join/<str:code>/", classroom_views.course_join, name="course_join"),
    path("courses/<uuid:course_id>/", classroom_views.course, name="course"),
    path("courses/<uuid:course_id>/assignments/new/", classroom_views.assignment_new, name="assignment_new"),
    path("courses/<uuid:course_id>/students/<str:username>/", classroom_views.student, name="course_student"),
    path("assignments/<uuid:assignment_id>/", classroom_views.assignment, name="assignment"),
    path("assignments/<uuid:assignment_id>/edit/", classroom_views.assignment_edit, name="assignment_edit"),
    path("submissions/<uuid:submission_id>/", classroom_views.submission, name="submission"),
    path("similarity/<uuid:report_id>/pairs/<int:index>/", classroom_views.similarity_pair, name="similarity_pair"),
    path("accounts/login/", throttled_login(views.LoginPage.as_view()), name="login"),
    path("accounts/logout/", sso_views.Logout.as_view(), name="logout"),
    path("accounts/signup/", views.signup, name="signup"),
    path("accounts/oidc/", include("playground.sso.urls")),
    path("account/", views.account, name="account"),
    path("account/tokens/", views.token_new, name="token_new"),
    path("account/tokens/<int:token_id>/revoke/", views.token_delete, name="token_delete"),
    path("account/password/", views.password_change, name="password_change"),
    path("account/invites/", views.invites, name="invites"),
    path("account/invites/new/", views.invite_new, name="invite_new"),
    path("account/invites/<int:invite_id>/revoke/", views.invite_delete, name="invite_delete"),
    path("favicon.ico", views.Favicon.as_view()),
    # Ahead of admin.site.urls, so that they answer the admin's own log-in and log-out URLs.
    path("admin/login/", throttled_login(views.admin_login)),
    path("admin/logout/", sso_views.Logout.as_view()),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("metrics", views.metrics, name="metrics"),
    path("lti/", include("playground.lti.urls")),
]
