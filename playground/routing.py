from typing import Any

from django.urls import path

from playground.consumers import RunConsumer

websocket_urlpatterns: list[Any] = [path("ws/runs/<str:run_id>/", RunConsumer.as_asgi())]  # type: ignore[arg-type]
