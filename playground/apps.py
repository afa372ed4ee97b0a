from django.apps import AppConfig


class PlaygroundConfig(AppConfig):
    name = "playground"
    verbose_name = "Cordon"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in, user_login_failed

        from playground import throttle

        user_login_failed.connect(throttle.login_failed, dispatch_uid="cordon.throttle.login_failed")
        user_logged_in.connect(throttle.logged_in, dispatch_uid="cordon.throttle.logged_in")
