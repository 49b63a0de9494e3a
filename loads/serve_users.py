"""Locust users for ``serve_app.py``: the request mix a model endpoint sees.

Why: Serve's HTTP proxy, router and replicas are what chaos on GPU nodes disturbs; these users
keep real requests flowing through all of them. FastHttpUser (geventhttpclient) so one Locust
process can push a few thousand requests per second. Mostly ``POST /predict`` with a JSON body,
some ``GET /predict?text=...``, a trickle of ``/healthz``. Run through the harness
(``LocustProcess``) or by hand::

    locust --headless -f loads/_locust_stats.py,loads/serve_users.py --host http://127.0.0.1:8000 \
        -u 20 -r 5 -t 60s
"""

from __future__ import annotations

import random

from locust import FastHttpUser, between, task

WORDS = ["ray", "serve", "gpu", "chaos", "drain", "node", "actor", "object", "store", "head"]


def _text() -> str:
    return " ".join(random.choices(WORDS, k=8))


class ServeUser(FastHttpUser):
    wait_time = between(0.01, 0.05)

    @task(8)
    def predict_post(self) -> None:
        self.client.post("/predict", json={"text": _text()}, name="/predict")

    @task(3)
    def predict_get(self) -> None:
        self.client.get(f"/predict?text={_text().replace(' ', '+')}", name="/predict")

    @task(1)
    def healthz(self) -> None:
        self.client.get("/healthz")
