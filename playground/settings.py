"""The one settings module. Every knob is an environment variable listed in `.env.example`.

Values are read with strict helpers: a malformed one stops start-up with a message that
names the variable. A `.env` file at the project root is read first; the environment wins.
"""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from playground.sso.config import check_sso_settings
from runner.config import ENV_FILE, PROJECT_ROOT, host_slots, paths_from_env
from runner.egress.policy import ceiling_from_env
from runner.env import ConfigError, env_bool, env_int, env_list, env_str, load_env_file
from runner.spec import maxima_from_env


def _secret_key(data_dir: Path) -> str:
    """CORDON_SECRET_KEY, or one generated once and kept (mode 0600) in the data directory."""
    configured = env_str("CORDON_SECRET_KEY", "")
    if configured:
        return configured
    key_file = data_dir / "secret_key"
    if not key_file.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(50))
    return key_file.read_text().strip()


try:
    load_env_file(ENV_FILE)
    _paths = paths_from_env()
    DATA_DIR = _paths.data_dir
    DEBUG = env_bool("CORDON_DEBUG", False)
    SECRET_KEY = _secret_key(DATA_DIR)
    ALLOWED_HOSTS = env_list("CORDON_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
    CSRF_TRUSTED_ORIGINS = env_list("CORDON_CSRF_TRUSTED_ORIGINS", [])
    _database_url = env_str("DATABASE_URL", "")
    REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
    HTTP_HOST = env_str("CORDON_HTTP_HOST", "127.0.0.1")
    HTTP_PORT = env_int("CORDON_HTTP_PORT", 8000, minimum=1, maximum=65535)
    CORDON_SIGNUP = env_bool("CORDON_SIGNUP", False)
    # Who may create a course: "everyone" (any account) or "instructors" (superusers and accounts
    # with playground.add_course: the "instructors" group single sign-on fills). An LMS launch by an
    # instructor (LTI) makes its course either way.
    CORDON_COURSE_CREATORS = env_str("CORDON_COURSE_CREATORS", "everyone")
    if CORDON_COURSE_CREATORS not in ("everyone", "instructors"):
        raise ConfigError(f"CORDON_COURSE_CREATORS must be 'everyone' or 'instructors', not {CORDON_COURSE_CREATORS!r}")
    # Single sign-on with OpenID Connect (playground/sso): off unless an issuer is set. Groups in the
    # groups claim make an account staff, superuser or instructor, again at each sign-in; a list left
    # empty leaves that flag to the console. CORDON_PASSWORD_LOGIN=false: SSO is the only way in.
    CORDON_OIDC_ISSUER = env_str("CORDON_OIDC_ISSUER", "")
    CORDON_OIDC_CLIENT_ID = env_str("CORDON_OIDC_CLIENT_ID", "")
    CORDON_OIDC_CLIENT_SECRET = env_str("CORDON_OIDC_CLIENT_SECRET", "")
    CORDON_OIDC_PROVIDER_NAME = env_str("CORDON_OIDC_PROVIDER_NAME", "single sign-on")
    CORDON_OIDC_SCOPES = env_str("CORDON_OIDC_SCOPES", "openid email profile")
    CORDON_OIDC_USERNAME_CLAIM = env_str("CORDON_OIDC_USERNAME_CLAIM", "preferred_username")
    CORDON_OIDC_GROUPS_CLAIM = env_str("CORDON_OIDC_GROUPS_CLAIM", "groups")
    CORDON_OIDC_STAFF_GROUPS = env_list("CORDON_OIDC_STAFF_GROUPS", [])
    CORDON_OIDC_SUPERUSER_GROUPS = env_list("CORDON_OIDC_SUPERUSER_GROUPS", [])
    CORDON_OIDC_INSTRUCTOR_GROUPS = env_list("CORDON_OIDC_INSTRUCTOR_GROUPS", [])
    CORDON_OIDC_SIGN_ALGO = env_str("CORDON_OIDC_SIGN_ALGO", "RS256")
    CORDON_PASSWORD_LOGIN = env_bool("CORDON_PASSWORD_LOGIN", True)
    check_sso_settings(
        issuer=CORDON_OIDC_ISSUER,
        client_id=CORDON_OIDC_CLIENT_ID,
        client_secret=CORDON_OIDC_CLIENT_SECRET,
        sign_algo=CORDON_OIDC_SIGN_ALGO,
        password_login=CORDON_PASSWORD_LOGIN,
    )
    CORDON_QUOTA_CONCURRENT_RUNS = env_int("CORDON_QUOTA_CONCURRENT_RUNS", 4, minimum=1)
    CORDON_QUOTA_RUNS_PER_HOUR = env_int("CORDON_QUOTA_RUNS_PER_HOUR", 300, minimum=1)
    CORDON_QUOTA_STORAGE_BYTES = env_int("CORDON_QUOTA_STORAGE_BYTES", 1 << 30, minimum=1)
    CORDON_DATASET_MAX_BYTES = env_int("CORDON_DATASET_MAX_BYTES", 64 << 20, minimum=1)
    # Every other request body (JSON, forms): refused past this, before it is read.
    CORDON_REQUEST_MAX_BYTES = env_int("CORDON_REQUEST_MAX_BYTES", 4 << 20, minimum=1024)
    # Served over HTTPS behind a proxy that sets X-Forwarded-Proto: Secure cookies, HSTS, redirect.
    CORDON_HTTPS = env_bool("CORDON_HTTPS", False)
    CORDON_HSTS_SECONDS = env_int("CORDON_HSTS_SECONDS", 31536000, minimum=0)
    CORDON_RETENTION_DAYS = env_int("CORDON_RETENTION_DAYS", 30, minimum=1)
    CORDON_API_THROTTLE = env_str("CORDON_API_THROTTLE", "600/min")
    # Failed log-ins and unknown bearer tokens: past these counts within the window, the address
    # (or the account, for log-ins) is refused with 429 for one window.
    CORDON_AUTH_FAILURES_PER_ADDRESS = env_int("CORDON_AUTH_FAILURES_PER_ADDRESS", 50, minimum=1)
    CORDON_AUTH_FAILURES_PER_ACCOUNT = env_int("CORDON_AUTH_FAILURES_PER_ACCOUNT", 10, minimum=1)
    CORDON_AUTH_THROTTLE_WINDOW_S = env_int("CORDON_AUTH_THROTTLE_WINDOW_S", 900, minimum=1)
    CORDON_LEASE_S = env_int("CORDON_LEASE_S", 20, minimum=5)
    # Seconds a queued run may wait for a live worker host that serves its engine.
    CORDON_QUEUE_WAIT_S = env_int("CORDON_QUEUE_WAIT_S", 300, minimum=10)
    # Grading runs (a test of a submission, a check program) in flight at once, site-wide: the rest
    # wait in the grading queue, served round-robin per student (classroom/grading.py). About the
    # workers' concurrency: fewer leaves workers idle, many more lets one student's burst queue up.
    CORDON_GRADING_SLOTS = env_int("CORDON_GRADING_SLOTS", 4, minimum=1)
    # CPU seconds one comparison of a test's output with its expectation may use (an RE2 pattern's
    # match, a diff), in a bounded child of its own (runner/bounded.py); past it, the test is
    # `not_graded` (a pattern) or failed without a line diff.
    CORDON_COMPARE_CPU_S = env_int("CORDON_COMPARE_CPU_S", 2, minimum=1, maximum=60)
    # Submissions: at most this many a minute by one student to one assignment, and by all its
    # students together to one assignment (429 with Retry-After past either).
    CORDON_SUBMISSIONS_PER_MINUTE_STUDENT = env_int("CORDON_SUBMISSIONS_PER_MINUTE_STUDENT", 6, minimum=1)
    CORDON_SUBMISSIONS_PER_MINUTE_ASSIGNMENT = env_int("CORDON_SUBMISSIONS_PER_MINUTE_ASSIGNMENT", 1200, minimum=1)
    # Wrong join codes: past these counts within the window, the user or the address is refused
    # with 429 for one window, even with a right code.
    CORDON_JOIN_FAILURES_PER_USER = env_int("CORDON_JOIN_FAILURES_PER_USER", 10, minimum=1)
    CORDON_JOIN_FAILURES_PER_ADDRESS = env_int("CORDON_JOIN_FAILURES_PER_ADDRESS", 50, minimum=1)
    CORDON_JOIN_THROTTLE_WINDOW_S = env_int("CORDON_JOIN_THROTTLE_WINDOW_S", 900, minimum=1)
    # This worker host's name: its WorkerHost row, each run's worker_host. Unique per host.
    CORDON_HOST_NAME = env_str("CORDON_HOST_NAME", "") or socket.gethostname()
    # The site's Ed25519 key that signs run receipts (PEM; made, mode 0600, on first use). Every
    # host of a site points this at a copy of the same key: one public key checks all receipts.
    CORDON_RECEIPT_KEY_FILE = Path(env_str("CORDON_RECEIPT_KEY_FILE", "") or DATA_DIR / "receipt_key.pem")
    # Where datasets, outputs and stored logs live: "filesystem" (MEDIA_ROOT, one host) or
    # "database" (the database every host already shares: playground/storage.py).
    CORDON_STORAGE = env_str("CORDON_STORAGE", "filesystem")
    if CORDON_STORAGE not in ("filesystem", "database"):
        raise ConfigError(f"CORDON_STORAGE must be 'filesystem' or 'database', not {CORDON_STORAGE!r}")
    # The operator's maximum for each limit (CORDON_MAX_<LIMIT>), read and checked once, here.
    CORDON_MAXIMA = maxima_from_env()
    # The operator's egress ceiling (CORDON_EGRESS_CEILING, a runner.egress.Policy): what any run's
    # egress policy may name at most. Empty, the default: no run gets a network.
    CORDON_EGRESS_CEILING = ceiling_from_env()
    # What an operator plugs in (README, "Operating Cordon"). Log lines: "json" (one object a line:
    # playground/logformat.py) or "plain" (the text lines of before).
    CORDON_LOG_FORMAT = env_str("CORDON_LOG_FORMAT", "json")
    if CORDON_LOG_FORMAT not in ("json", "plain"):
        raise ConfigError(f"CORDON_LOG_FORMAT must be 'json' or 'plain', not {CORDON_LOG_FORMAT!r}")
    # Prometheus metrics: every process of this host writes its counts here (prometheus_client's
    # multiprocess mode, which reads the variable when it is first imported: set here, before).
    # `/metrics` answers a bearer token of an account with the view_metrics permission; with
    # CORDON_METRICS_BIND (host:port) a worker host serves them there too, without a token.
    CORDON_METRICS_DIR = Path(env_str("CORDON_METRICS_DIR", "") or DATA_DIR / "metrics" / CORDON_HOST_NAME)
    CORDON_METRICS_BIND = env_str("CORDON_METRICS_BIND", "")
    _bind_port = CORDON_METRICS_BIND.rpartition(":")[2]
    if CORDON_METRICS_BIND and not (_bind_port.isdigit() and int(_bind_port) <= 65535):
        raise ConfigError(f"CORDON_METRICS_BIND must be host:port, such as 10.0.0.5:9464; got {CORDON_METRICS_BIND!r}")
    # Days each kind of data is kept (retention: playground/services/retention.py). Receipts and
    # audit rows (staff accesses, purges) outlive logs and outputs by default.
    CORDON_RETENTION = {
        "logs": env_int("CORDON_RETENTION_LOGS_DAYS", CORDON_RETENTION_DAYS, minimum=1),
        "outputs": env_int("CORDON_RETENTION_OUTPUTS_DAYS", CORDON_RETENTION_DAYS, minimum=1),
        "snapshots": env_int("CORDON_RETENTION_SNAPSHOTS_DAYS", CORDON_RETENTION_DAYS, minimum=1),
        "datasets": env_int("CORDON_RETENTION_DATASETS_DAYS", CORDON_RETENTION_DAYS, minimum=1),
        "audit": env_int("CORDON_RETENTION_AUDIT_DAYS", 3650, minimum=1),
    }
except ConfigError as exc:
    raise ImproperlyConfigured(f"Cordon configuration error: {exc}") from exc

BASE_DIR = PROJECT_ROOT

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "ninja",  # its Swagger UI assets, served from here: /api/docs works under the site's CSP
    "playground",
    "playground.lti",  # LTI 1.3 Advantage (label "lti"): its own models and migrations
]

MIDDLEWARE = [
    "playground.fairness.LargeBodiesYield",  # first: a large body's whole handling yields to the others
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "playground.uploads.RawUploadNamesMiddleware",
    "playground.security.SecurityHeadersMiddleware",
    "playground.apierrors.ApiErrorShapeMiddleware",
]

ROOT_URLCONF = "playground.urls"
ASGI_APPLICATION = "playground.asgi.application"
WSGI_APPLICATION = "playground.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            "builtins": ["playground.templatetags.units"],  # |size and |seconds in every template
        },
    },
]

# SQLite: several processes (web, workers) write, so wait for the lock rather than fail. WAL lets
# readers (the API's polls) run beside a writer instead of queueing behind it, and with
# synchronous=NORMAL a commit is an append to the log, synced at checkpoints, not two or three
# fsyncs: a run's half-dozen state rows cost milliseconds each on a busy disk. A crash of the host
# (not of a process) can lose the last commits, never the database's consistency.
SQLITE_OPTIONS = {
    "timeout": 20,
    "transaction_mode": "IMMEDIATE",
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
}

if _database_url:
    # A connection per request or task, never kept: under ASGI each request runs its sync code in a
    # thread of its own, and kept connections pile up with the threads (Django advises against
    # persistent connections under ASGI). Two worker hosts and the web on a 100-connection
    # PostgreSQL ran out of connections in a 200-run burst with them kept for 60 s.
    DATABASES = {"default": dj_database_url.parse(_database_url, conn_max_age=0)}
    if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        DATABASES["default"]["OPTIONS"] = SQLITE_OPTIONS
        DATABASES["default"]["CONN_MAX_AGE"] = 0
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(DATA_DIR / "cordon.sqlite3"),
            "OPTIONS": SQLITE_OPTIONS,
            # A file, not memory, so that the Celery worker under test shares the test database.
            "TEST": {"NAME": str(DATA_DIR / "test-cordon.sqlite3")},
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# Uploaded datasets and exported outputs. Never served directly: downloads go through the API,
# which checks ownership and sets Content-Disposition: attachment.
MEDIA_ROOT = DATA_DIR / "media"
STORAGES = {
    "default": {
        "BACKEND": "django.core.files.storage.FileSystemStorage"
        if CORDON_STORAGE == "filesystem"
        else "playground.storage.DatabaseStorage"
    },
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
FILE_UPLOAD_PERMISSIONS = 0o600
DATA_UPLOAD_MAX_MEMORY_SIZE = CORDON_REQUEST_MAX_BYTES
# Uploads stream to a temporary file, the per-route and per-file caps checked as they arrive.
FILE_UPLOAD_HANDLERS = [
    "playground.bodies.CappedUploadHandler",
    "django.core.files.uploadhandler.TemporaryFileUploadHandler",
]

# Passwords (Django's own backend) unless CORDON_PASSWORD_LOGIN=false, which also ends the sessions
# passwords opened; OpenID Connect where an issuer is configured.
AUTHENTICATION_BACKENDS = [
    *(["django.contrib.auth.backends.ModelBackend"] if CORDON_PASSWORD_LOGIN else []),
    *(["playground.sso.backend.OidcBackend"] if CORDON_OIDC_ISSUER else []),
]

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "home"

CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    # Failed-authentication counts (playground/throttle.py): in Redis, so that every web process on
    # every host sees the same counts. Short timeouts: an unreachable Redis throttles nobody.
    "throttle": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "cordon-throttle",
        "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
    },
}

NINJA_DEFAULT_THROTTLE_RATES = {"auth": CORDON_API_THROTTLE, "user": CORDON_API_THROTTLE, "anon": "60/min"}

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True

SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
if CORDON_HTTPS:
    # The TLS proxy in front says the request came over HTTPS; only it can set this header,
    # so the proxy must strip what clients send (documented in the README).
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = CORDON_HSTS_SECONDS
    SECURE_HSTS_INCLUDE_SUBDOMAINS = False

CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# The worker for people's runs: a process per run the host admits at once (its admission's slots),
# not per core. Each process waits on one sandbox, and one that finishes slowly (a cell's displays
# made safe within its budget, a long run) then leaves the others to the rest of the queue while the
# host has room. The grading worker sets its own (CORDON_GRADING_CONCURRENCY, in the Procfile).
CELERY_WORKER_CONCURRENCY = host_slots()
CELERY_TASK_DEFAULT_QUEUE = "namespace"
# Redis redelivers an unacknowledged task after this; longer than any run may take.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_TASK_ROUTES = {
    "playground.tasks.purge_expired_data": {"queue": "maintenance"},
    "playground.lti.tasks.*": {"queue": "maintenance"},  # scores sent to an LMS: outbound HTTP, no sandbox
}
# The reaper is not here: every worker host runs its own (playground/celery.py's HostLoop), so a
# host that dies is reaped by the others whichever host the beat runs on.
CELERY_BEAT_SCHEDULE = {
    "purge-expired-data": {"task": "playground.tasks.purge_expired_data", "schedule": 3600.0},
    # A score whose send was lost (a broker restart) is sent again: an LMS's grade is never left behind.
    "lti-resend-stale-passbacks": {
        "task": "playground.lti.tasks.resend_stale_passbacks",
        "schedule": 600.0,
        "options": {"queue": "maintenance"},
    },
}

# Live output. Every socket that joins or leaves its run's group holds a Redis connection for
# that command, so a burst of sockets needs a pool that waits (at most `timeout` seconds) rather
# than one that fails: see playground/channel_layer.py. 200 sockets opened and closed at once
# took about 0.5 s with pools of 4, 10 or 50 alike; 10 per process leaves room to spare.
# No socket timeout: redis-py 8's default of 5 s cut the layer's 5 s blocking receive short (an
# idle socket died after 5 s), and on Python 3.11 the send timeout's asyncio.wait_for can swallow
# a closing socket's cancellation. TCP keepalive, on by default in redis-py 8, finds dead peers.
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "playground.channel_layer.BoundedRedisChannelLayer",
        "CONFIG": {
            "hosts": [{"address": REDIS_URL, "max_connections": 10, "timeout": 5, "socket_timeout": None}],
        },
    }
}

os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(CORDON_METRICS_DIR)
CORDON_METRICS_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "playground.logformat.JsonFormatter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", **({"formatter": "json"} if CORDON_LOG_FORMAT == "json" else {})}
    },
    "root": {"handlers": ["console"], "level": "INFO"},
}
