"""budget.example's WSGI entry point: I Hate Money, configured by deploy/ihatemoney.cfg,
with Prometheus' /metrics beside it."""

import os
from pathlib import Path

os.environ.setdefault(
    "IHATEMONEY_SETTINGS_FILE_PATH", str(Path(__file__).with_name("ihatemoney.cfg"))
)

from prometheus_client import make_wsgi_app  # noqa: E402
from werkzeug.middleware.dispatcher import DispatcherMiddleware  # noqa: E402

from ihatemoney.wsgi import application as ihatemoney  # noqa: E402

application = DispatcherMiddleware(ihatemoney, {"/metrics": make_wsgi_app()})
