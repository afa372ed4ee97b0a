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
    from runner.engines.namespace import check_available
    from runner.supervisor import Supervisor

    supervisor = Supervisor()
    namespace_ok, namespace_why = check_available()
    canary = supervisor.read_canary() or {}
    engines = [name for name, ok in (("namespace", namespace_ok), ("smolvm", bool(canary.get("ok")))) if ok]
    report = {"namespace": namespace_why, "smolvm_canary": canary, "require_vm": supervisor.settings.require_vm}
    if supervisor.settings.require_vm:
        engines = [e for e in engines if e == "smolvm"]
    return engines, report


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
    from playground.services import worker_register

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
