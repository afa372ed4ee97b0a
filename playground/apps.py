from django.apps import AppConfig


class PlaygroundConfig(AppConfig):
    name = "playground"
    verbose_name = "Cordon"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in, user_login_failed

        # The Celery app, so that the shared tasks this process sends use its broker.
        from playground import celery, observe, throttle  # noqa: F401

        user_login_failed.connect(throttle.login_failed, dispatch_uid="cordon.throttle.login_failed")
        user_logged_in.connect(throttle.logged_in, dispatch_uid="cordon.throttle.logged_in")
        user_login_failed.connect(observe.login_failed, dispatch_uid="cordon.observe.login_failed")
        user_logged_in.connect(observe.logged_in, dispatch_uid="cordon.observe.logged_in")
