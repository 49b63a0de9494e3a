"""Locust users for ``serve_app.py``: the request mix a model endpoint sees.

Why: Serve's HTTP proxy, router and replicas are what chaos on GPU nodes disturbs; these users
keep real requests flowing through all of them. FastHttpUser (geventhttpclient) so one Locust
process can push a few thousand requests per second. Mostly ``POST /predict`` with a JSON body,
some ``GET /predict?text=...``, a trickle of ``/healthz`` (8 : 3 : 1, drawn per request).

Open loop when ``RAYCHAOS_RATE`` (requests per second for the whole load) is set: each user
offers ``RATE / users`` arrivals per second on a fixed schedule (arrival k at t0 + k / rate),
one greenlet per arrival, so a slow or stalled server never delays the next arrival — a stall
shows as latency and failures, not as a smaller sample. An arrival that finds all ``POOL``
connections busy waits for one, and that wait is part of its latency. Each stats line then
carries ``offered`` (arrivals started in that second). Without it: closed loop, as before.
Run through the harness (``LocustProcess``) or by hand::

    RAYCHAOS_RATE=30 locust --headless -f loads/_locust_stats.py,loads/serve_users.py \
        --host http://127.0.0.1:8000 -u 2 -r 2 -t 60s
"""

from __future__ import annotations

import os
import random
import sys
import time

import gevent
from gevent.pool import Group
from locust import FastHttpUser, between, task

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _locust_stats import count_offered  # noqa: E402  (the plugin already loaded: same module)

WORDS = ["ray", "serve", "gpu", "chaos", "drain", "node", "actor", "object", "store", "head"]
RATE = float(os.environ.get("RAYCHAOS_RATE") or 0)  # requests/s for the whole load; 0: closed
POOL = 32  # connections per user: enough that a slow response rarely makes an arrival wait
MIX = (("post", 8), ("get", 3), ("healthz", 1))


def _text() -> str:
    return " ".join(random.choices(WORDS, k=8))


def _user_count(user: FastHttpUser) -> int:
    """Users this process's rate is split between (the whole load's, on a master's workers)."""
    parsed = getattr(user.environment, "parsed_options", None)
    return max(1, int(getattr(parsed, "num_users", None) or 1))


class ServeUser(FastHttpUser):
    wait_time = between(0.01, 0.05)
    concurrency = POOL

    def predict_post(self) -> None:
        self.client.post("/predict", json={"text": _text()}, name="/predict")

    def predict_get(self) -> None:
        self.client.get(f"/predict?text={_text().replace(' ', '+')}", name="/predict")

    def healthz(self) -> None:
        self.client.get("/healthz")

    def _one(self) -> None:
        kind = random.choices([k for k, _ in MIX], weights=[w for _, w in MIX])[0]
        {"post": self.predict_post, "get": self.predict_get, "healthz": self.healthz}[kind]()

    @task
    def traffic(self) -> None:
        if RATE <= 0:
            self._one()  # closed loop: one request, then wait_time
            return
        self._pace(RATE / _user_count(self))

    def _pace(self, rate: float) -> None:
        """Start arrival k at t0 + k / rate, each in its own greenlet, forever (until Locust
        stops the user; its arrivals in flight are killed with it)."""
        group = Group()
        t0 = time.monotonic() + random.random() / rate  # users' schedules interleave
        k = 0
        try:
            while True:
                delay = t0 + k / rate - time.monotonic()
                if delay > 0:
                    gevent.sleep(delay)
                count_offered()
                group.spawn(self._one)
                k += 1
        finally:
            group.kill(block=False)
