from django.apps import AppConfig


class PlaygroundConfig(AppConfig):
    name = "playground"
    verbose_name = "Cordon"
    default_auto_field = "django.db.models.BigAutoField"
