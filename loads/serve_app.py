"""A Ray Serve application shaped like production inference: CPU preprocess -> GPU model.

Why: the most common Ray-on-Kubernetes service is a model behind HTTP, with the model replicas
on GPU nodes and cheap preprocessing beside them. Chaos against GPU nodes (drains, preemption)
only means something if real requests cross that boundary, so this app composes two
deployments behind one route:

* ``Preprocess`` (CPU): parses the request into a feature vector;
* ``Inference`` (``num_gpus=0.5``, so it lands on GPU nodes; GPUs are logical in tests): a small
  matrix product standing in for the model;
* ``Gateway`` (the ingress): ``GET|POST /predict`` -> preprocess -> inference; ``GET /healthz``.

Deploy it with ``serve run loads.serve_app:app`` or, in Python, ``serve.run(build_app())``.
Arguments to :func:`build_app` size it (replicas, GPU fraction). ``loads/serve_users.py`` is the
matching Locust load.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request
from starlette.responses import JSONResponse

__all__ = ["Gateway", "Inference", "Preprocess", "app", "build_app"]

FEATURES = 64


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
class Preprocess:
    """CPU work: turn any text into a deterministic feature vector."""

    def __call__(self, text: str) -> list[float]:
        digest = hashlib.sha256(text.encode()).digest()
        seed = int.from_bytes(digest[:8], "little")
        return np.random.default_rng(seed).random(FEATURES).tolist()


@serve.deployment(ray_actor_options={"num_gpus": 0.5, "num_cpus": 0.1})
class Inference:
    """The "model": a fixed random projection; reports which accelerator slot served it."""

    def __init__(self) -> None:
        self.weights = np.random.default_rng(0).random((FEATURES, 8))
        import ray

        self.gpu_ids = ray.get_gpu_ids()

    def __call__(self, features: list[float]) -> dict:
        scores = np.asarray(features) @ self.weights
        return {"label": int(np.argmax(scores)), "scores": scores.round(4).tolist(),
                "gpu_ids": [str(g) for g in self.gpu_ids]}


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
class Gateway:
    """The one HTTP ingress: routes ``/predict`` through preprocess then inference."""

    def __init__(self, preprocess: DeploymentHandle, inference: DeploymentHandle) -> None:
        self.preprocess = preprocess
        self.inference = inference

    async def __call__(self, request: Request) -> JSONResponse:
        path = request.url.path.rstrip("/")
        if path.endswith("/healthz"):
            return JSONResponse({"ok": True})
        if not path.endswith("/predict"):
            return JSONResponse({"error": f"no route {request.url.path}"}, status_code=404)
        if request.method == "POST":
            body = await request.body()
            try:
                text = str(json.loads(body or b"{}").get("text", ""))
            except (ValueError, AttributeError):
                return JSONResponse({"error": "body must be a JSON object"}, status_code=400)
        else:
            text = request.query_params.get("text", "")
        features = await self.preprocess.remote(text)
        result = await self.inference.remote(features)
        return JSONResponse(result)


def build_app(
    preprocess_replicas: int = 1,
    inference_replicas: int = 1,
    gpu_fraction: float = 0.5,
):
    """The bound application; replicas and the inference GPU share are the knobs."""
    return Gateway.bind(
        Preprocess.options(num_replicas=preprocess_replicas).bind(),
        Inference.options(
            num_replicas=inference_replicas,
            ray_actor_options={"num_gpus": gpu_fraction, "num_cpus": 0.1},
        ).bind(),
    )


app = build_app()
