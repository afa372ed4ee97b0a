"""LTI 1.3 Advantage: Cordon as a tool an LMS (Canvas, Moodle, Blackboard, Brightspace) launches."""

from django.apps import AppConfig


class LtiConfig(AppConfig):
    name = "playground.lti"
    label = "lti"
    verbose_name = "LTI (LMS links)"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from playground.lti import receivers  # noqa: F401 - connects the score_changed receiver
