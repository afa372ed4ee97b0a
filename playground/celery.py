"""The Celery application; `celery -A playground worker` finds it here.

With no -Q flag a worker serves the queues of every engine its host can run (the namespace
engine if bubblewrap and cgroups work, smolvm if the cached canary boot passed), registers
itself as a WorkerHost with that report, and sweeps what a crashed worker left on the host.
"""

import os
import socket
import threading
import time
from typing import Any

from celery import Celery, signals
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "playground.settings")

app = Celery("playground")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def engines_here() -> tuple[list[str], dict[str, Any]]:
    """The engines this host can serve, from checks that are quick (no canary boot here)."""
    from runner.config import paths_from_env
    from runner.registry import Registry
    from runner.supervisor import SupervisorSettings

    registry = Registry(SupervisorSettings.from_env(), paths_from_env().host_state_dir)
    report = {
        "namespace": registry.available("namespace").why,
        "smolvm_canary": registry.read_canary() or {},
        "require_vm": registry.settings.require_vm,
    }
    return registry.serves(), report


@signals.celeryd_init.connect
def _serve_engine_queues(sender: Any = None, conf: Any = None, options: Any = None, **kwargs: Any) -> None:
    if options is not None and options.get("queues"):
        return  # the operator chose with -Q
    engines, _ = engines_here()
    conf.task_queues = [Queue(name) for name in engines] + [Queue("maintenance")]


HEARTBEAT_S = 60.0


@signals.worker_ready.connect
def _register_and_sweep(sender: Any = None, **kwargs: Any) -> None:
    from runner.supervisor import Supervisor

    _register()
    Supervisor().sweep()
    threading.Thread(target=_heartbeat, name="cordon-worker-heartbeat", daemon=True).start()


def _register() -> None:
    from playground.services.hosts import worker_register

    engines, report = engines_here()
    worker_register(name=socket.gethostname(), engines=engines, doctor=report)


def _heartbeat() -> None:
    """Keep this host's WorkerHost fresh (and its engines current), so `auto` routes to live hosts."""
    from django.db import close_old_connections

    while True:
        time.sleep(HEARTBEAT_S)
        try:
            _register()
        except Exception:  # the database may be briefly away; the next beat tries again
            close_old_connections()
