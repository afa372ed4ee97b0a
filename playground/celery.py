"""The Celery application; `celery -A playground worker` finds it here.

With no -Q flag a worker serves the queues of every engine its host can run (the namespace
engine if bubblewrap and cgroups work, smolvm if the cached canary boot passed), registers
itself as a WorkerHost (named CORDON_HOST_NAME) with that report, and sweeps what a crashed
worker left on the host. Then its HostLoop beats, follows the host's drain state, reaps and sweeps.

People's runs go to each engine's queue, grading runs (tests, check programs) to its "-grading"
queue. CORDON_WORKER_QUEUES says which a worker started without -Q consumes: `runs` (people's, and
the maintenance queue), `grading`, or `all` (the default: one worker does everything). `make run`
starts one worker of each kind, so a person's run never waits for a pool process that a course's
grading holds; the grading worker also runs the GradingLoop.
"""

import logging
import os
import threading
import time
from typing import Any

from celery import Celery, signals
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "playground.settings")
log = logging.getLogger(__name__)


def _survive_a_lost_broker_connection() -> None:
    """kombu 5.7's Redis transport, after the broker dropped a connection (Redis restarted, or
    killed), still uses the channels of the released connection: restoring their unacknowledged
    messages as they close, acknowledging a task that finished after the reconnect. Each reaches
    Channel._connparams with no connection left and raises AttributeError ('NoneType' object has
    no attribute 'hostname' / 'client'), which Celery calls an unrecoverable error: the worker
    exits (seen in the chaos part of make test-hosts: both workers gone, every later run left
    queued). Raised as the connection error it is, Celery logs it ("Couldn't ack", "Restoring")
    and carries on with its new connection. What cannot be acknowledged or restored through a
    dropped connection is the reaper's: a run whose task was lost is sent again
    (dispatch.requeue_stale), one run twice is claimed once."""
    from kombu.transport import redis as kombu_redis
    from redis.exceptions import ConnectionError as RedisConnectionError

    connparams = kombu_redis.Channel._connparams  # type: ignore[attr-defined]

    def _connparams(self: Any, asynchronous: bool = False) -> Any:
        if self.connection is None or self.connection.client is None:
            raise RedisConnectionError("this channel's broker connection is gone (the broker dropped it)")
        return connparams(self, asynchronous=asynchronous)

    kombu_redis.Channel._connparams = _connparams  # type: ignore[attr-defined]


_survive_a_lost_broker_connection()
app = Celery("playground")
app.config_from_object("django.conf:settings", namespace="CELERY")


@signals.setup_logging.connect
def _django_logging(**kwargs: Any) -> None:
    """The worker and the beat log as the web does (settings.LOGGING: one JSON object a line, or
    plain): connecting here keeps Celery from putting its own format on the root logger."""
    import logging.config

    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)


app.autodiscover_tasks()


def engines_here() -> tuple[list[str], dict[str, Any]]:
    """The engines this host can serve, from checks that are quick (no canary boot here)."""
    from runner.config import SupervisorSettings, paths_from_env
    from runner.registry import Registry

    registry = Registry(SupervisorSettings.from_env(), paths_from_env().host_state_dir)
    return registry.serves(), registry.report()


WORKER_KINDS = ("all", "runs", "grading")


def worker_kind() -> str:
    kind = os.environ.get("CORDON_WORKER_QUEUES", "") or "all"
    if kind not in WORKER_KINDS:
        raise ValueError(f"CORDON_WORKER_QUEUES must be one of {', '.join(WORKER_KINDS)}, not {kind!r}")
    return kind


def queues_for(kind: str, engines: list[str]) -> list[str]:
    """The queues a worker of this kind consumes on a host serving `engines`."""
    from playground.services.dispatch import grading_queue

    runs = [*engines, "maintenance"] if kind in ("all", "runs") else []
    return runs + ([grading_queue(engine) for engine in engines] if kind in ("all", "grading") else [])


@signals.celeryd_init.connect
def _serve_engine_queues(sender: Any = None, conf: Any = None, options: Any = None, **kwargs: Any) -> None:
    try:
        kind = worker_kind()  # checked even with -Q: a misspelt kind stops the worker here
        _check_sandbox_paths()
    except ValueError as exc:  # a ConfigError too. Celery logs a handler's Exception and goes on: not this
        raise SystemExit(f"cordon: this worker cannot start: {exc}") from exc
    if options is not None and options.get("queues"):
        return  # the operator chose with -Q
    engines, _ = engines_here()
    conf.task_queues = [Queue(name) for name in queues_for(kind, engines)]


def _check_sandbox_paths() -> None:
    """A host whose sandboxes' uid cannot reach their views would fail every run's setup: the
    worker refuses to start, naming the directory (runner's ConfigError), rather than take runs."""
    from runner import upkeep
    from runner.supervisor import Supervisor

    upkeep.check_sandbox_paths(Supervisor.here())


# Each worker host's own loop (a thread of the worker's main process): its heartbeat and drain
# state every TICK_S, the reaper and this host's sweep every REAP_S, its engines and doctor report
# every REGISTER_S. Every host reaps, so a host that dies is reaped by the others (the reaper's
# updates are conditional: two hosts reaping the same run finish it once). Grading has a thread of
# its own (GradingLoop): its comparisons take up to their bound each, which must hold neither the
# heartbeat nor the sweep.
TICK_S = 5.0
REAP_S = 10.0
REGISTER_S = 60.0


@signals.worker_process_shutdown.connect
def _close_ready_sandboxes(**kwargs: Any) -> None:
    """A pool process that ends (recycled, or the worker stopping) tears its ready sandboxes down
    now (runner.ready), not leaving them to the next sweep: Celery's children end with os._exit,
    which runs no exit handler."""
    from runner.ready import ReadyPool

    ReadyPool.close_mine()
    from playground.metrics import process_ended

    process_ended(os.getpid())  # its live gauges go; its counts stay in the host's sums


@signals.worker_ready.connect
def _register_and_sweep(sender: Any = None, **kwargs: Any) -> None:
    from playground.services.hosts import host_sweep

    kind = worker_kind()
    _register(started=True)
    host_sweep(min_age_s=0)  # what this host's runs left when it died (a live run's lock keeps it)
    if kind != "grading":
        _warm_up()
        _serve_metrics()
    consumed = sorted(sender.app.amqp.queues.consume_from)
    HostLoop(nodename=sender.hostname, queues=_engine_queues(sender.app), consumed=consumed).start()
    if kind != "runs":
        GradingLoop().start()


def _serve_metrics() -> None:
    """With CORDON_METRICS_BIND (host:port), this host's metrics served there by the runs worker,
    for Prometheus to scrape a worker host that has no web process (playground/metrics.py)."""
    from django.conf import settings

    from playground.metrics import serve

    if settings.CORDON_METRICS_BIND:
        address = serve(settings.CORDON_METRICS_BIND)
        log.info("metrics served at http://%s/metrics", address)


def _warm_up() -> None:
    """With CORDON_SMOLVM_WARM_BUILD=start, build the warm microVM bases now, not on a run's need."""
    from runner import upkeep
    from runner.supervisor import Supervisor

    try:
        started = upkeep.warm_up(Supervisor.here())
    except Exception:  # a warm start is an optimisation: runs boot cold without it
        log.warning("could not start building warm microVM bases", exc_info=True)
        return
    if started:
        log.info("building warm microVM bases: %s", ", ".join(started))


def _engine_queues(app: Any) -> list[str]:
    """The engine queues this worker consumes (what a drain stops), not the maintenance queue."""
    return sorted(name for name in app.amqp.queues.consume_from if name != "maintenance")


def _register(*, started: bool = False) -> None:
    from django.conf import settings

    from playground.services.hosts import worker_register

    engines, report = engines_here()
    worker_register(name=settings.CORDON_HOST_NAME, engines=engines, doctor=report, started=started)


class HostLoop(threading.Thread):
    """This host's heartbeat, drain, reaper and sweep; a failure of one round (the database briefly
    away) is logged and the next round tries again."""

    def __init__(self, *, nodename: str, queues: list[str], consumed: list[str] | None = None) -> None:
        super().__init__(name="cordon-host-loop", daemon=True)
        self.nodename, self.queues = nodename, queues
        self.consumed = consumed if consumed is not None else queues
        self.consuming = True
        self.next_reap = self.next_register = 0.0

    def run(self) -> None:
        from django.db import close_old_connections

        while True:
            time.sleep(TICK_S)
            try:
                self.tick(time.monotonic())
            except Exception:
                log.warning("host loop round failed", exc_info=True)
            finally:
                close_old_connections()

    def tick(self, now: float) -> None:
        from django.conf import settings

        from playground.services import hosts, runs

        try:
            self.declare_queues()
        except Exception:  # the broker is away: the next round declares them
            log.warning("host loop: could not declare the queues with the broker", exc_info=True)
        if now >= self.next_register:
            self.next_register = now + REGISTER_S
            _register()
        draining = hosts.host_beat(name=settings.CORDON_HOST_NAME)
        if draining is not None and draining == self.consuming:
            self.set_consuming(not draining)
        if now >= self.next_reap:
            self.next_reap = now + REAP_S
            for step in (runs.reap, hosts.host_sweep):  # each on its own: one failing skips no other
                try:
                    step()
                except Exception:
                    log.warning("host loop: %s failed", step.__name__, exc_info=True)

    def declare_queues(self) -> None:
        """Declare the queues this worker consumes (and their bindings) with the broker again. Redis
        keeps a queue's binding as a key: restarted empty, it had none, and every task sent to the
        queue was refused ("Cannot route message ... the key ('_kombu.binding.namespace') has been
        removed") while the worker, which declares them only as it starts, waited for ever. A few
        idempotent Redis commands each round; the web's resends (dispatch._Unsent) then go through."""
        with app.connection_for_write() as connection:
            channel = connection.default_channel
            for name in self.consumed:
                app.amqp.queues[name](channel).declare()

    def set_consuming(self, consuming: bool) -> None:
        """Stop (drain) or start again (resume) consuming this host's engine queues."""
        control = app.control.add_consumer if consuming else app.control.cancel_consumer
        for queue in self.queues:
            control(queue, destination=[self.nodename], reply=True, timeout=5)
        self.consuming = consuming
        log.info("%s %s", "resumed" if consuming else "draining: stopped consuming", ", ".join(self.queues))


class GradingLoop(threading.Thread):
    """Every REAP_S: the grading runs whose own task did not settle them (its worker was lost after
    the run) become results, and free grading slots are handed out. Each result is settled on its
    own (classroom/grading_settle.settle); a failed round is logged and the next tries again."""

    def __init__(self) -> None:
        super().__init__(name="cordon-grading-loop", daemon=True)

    def run(self) -> None:
        from django.db import close_old_connections

        from playground.classroom import grading_settle

        while True:
            time.sleep(REAP_S)
            try:
                grading_settle.settle()
            except Exception:
                log.warning("grading loop round failed", exc_info=True)
            finally:
                close_old_connections()
