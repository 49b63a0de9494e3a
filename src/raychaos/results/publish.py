"""Put a finished run on the dashboards people already use: a Pushgateway and Grafana.

- **Pushgateway** (``--push-gateway URL``): the run's figures
  (:func:`raychaos.results.openmetrics.figures_text`) are PUT to
  ``URL/metrics/job/raychaos/experiment/<slug>``, replacing that experiment's previous push, so
  Prometheus scraping the gateway builds each figure's history run after run. (The timestamped
  timeline is in ``openmetrics.txt``, for ``promtool tsdb create-blocks-from openmetrics``: a
  Pushgateway refuses timestamps.)
- **Grafana** (``--grafana-url URL``): one region annotation per fault — from its start to the
  end of its effect, tagged ``raychaos``, the experiment, the fault and the verdict — through
  Grafana's HTTP API (``POST /api/annotations``), so a game day shows up on the cluster's own
  dashboards next to Ray's metrics. The token comes from the environment
  (``RAYCHAOS_GRAFANA_TOKEN``, else ``GRAFANA_TOKEN``), never from a file or a flag.

Only the standard library's HTTP client is used; every failure is one sentence naming the URL.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raychaos.errors import ConfigError, RaychaosError
from raychaos.results.openmetrics import figures_text
from raychaos.results.regions import regions
from raychaos.results.store import RunView, load_run

__all__ = ["TOKEN_VARIABLES", "Publish", "annotate_faults", "fault_annotations", "push_figures"]

TOKEN_VARIABLES = ("RAYCHAOS_GRAFANA_TOKEN", "GRAFANA_TOKEN")
TIMEOUT_S = 10.0


def _check_url(option: str, url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{option}: expected an http(s) URL such as http://127.0.0.1:9091, "
                          f"got {url!r}")
    return url.rstrip("/")


@dataclass(frozen=True)
class Publish:
    """Where finished runs go besides their results folder (both optional)."""

    push_gateway: str | None = None
    grafana_url: str | None = None
    grafana_token: str | None = None
    grafana_dashboard: str | None = None

    @classmethod
    def from_options(cls, push_gateway: str | None, grafana_url: str | None,
                     grafana_dashboard: str | None = None,
                     environ: dict[str, str] | None = None) -> Publish | None:
        """Checked before anything starts: a bad URL or a missing token is refused here."""
        if not push_gateway and not grafana_url:
            return None
        env = os.environ if environ is None else environ
        token = next((env[v] for v in TOKEN_VARIABLES if env.get(v)), None)
        if grafana_url and not token:
            raise ConfigError(f"--grafana-url: no Grafana token in the environment (set "
                              f"{TOKEN_VARIABLES[0]} to a service-account token)")
        return cls(_check_url("--push-gateway", push_gateway) if push_gateway else None,
                   _check_url("--grafana-url", grafana_url) if grafana_url else None,
                   token, grafana_dashboard)

    def run(self, run_dir: str | Path) -> list[str]:
        """Publish one finished run; returns what was done, one line each. Raises
        RaychaosError (one sentence) when a server refuses or cannot be reached."""
        view = load_run(run_dir)
        done = []
        if self.push_gateway:
            done.append(f"pushed the run's figures to {push_figures(view, self.push_gateway)}")
        if self.grafana_url and self.grafana_token:
            ids = annotate_faults(view, self.grafana_url, self.grafana_token,
                                  self.grafana_dashboard)
            done.append(f"added {len(ids)} Grafana annotation(s) at {self.grafana_url}")
        return done


def _send(method: str, url: str, body: bytes, headers: dict[str, str]) -> bytes:
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310
            data: bytes = response.read()
            return data
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace").strip()[:300]
        raise RaychaosError(f"{method} {url}: the server answered {exc.code} {exc.reason}"
                            + (f" ({detail})" if detail else "")) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RaychaosError(f"{method} {url}: could not reach the server ({reason})") from exc


def push_figures(view: RunView, gateway: str) -> str:
    """PUT the run's figures to the Pushgateway's group for this experiment; the group URL."""
    slug = str(view.summary.get("slug") or view.run_dir.name)
    url = (f"{gateway.rstrip('/')}/metrics/job/raychaos/experiment/"
           f"{urllib.parse.quote(slug, safe='')}")
    _send("PUT", url, figures_text(view).encode("utf-8"),
          {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
    return url


def fault_annotations(view: RunView, dashboard_uid: str | None = None) -> list[dict[str, Any]]:
    """One Grafana region annotation per fault (times in epoch milliseconds)."""
    s = view.summary
    slug = str(s.get("slug") or view.run_dir.name)
    verdict = str(s.get("verdict"))
    out = []
    for region in regions(view.records):
        if region.kind != "fault":
            continue
        body: dict[str, Any] = {
            "time": int(region.ts0 * 1000), "timeEnd": int(max(region.ts1, region.ts0) * 1000),
            "tags": ["raychaos", slug, region.name, f"verdict:{verdict}"],
            "text": (f"raychaos: {region.label} in {s.get('experiment') or slug} "
                     f"(run {s.get('run_id')}, verdict {verdict}, "
                     f"{region.t1 - region.t0:.1f} s)")}
        if dashboard_uid:
            body["dashboardUID"] = dashboard_uid
        out.append(body)
    return out


def annotate_faults(view: RunView, grafana_url: str, token: str,
                    dashboard_uid: str | None = None) -> list[int]:
    """POST every fault's annotation to Grafana; the ids Grafana gave them."""
    url = f"{grafana_url.rstrip('/')}/api/annotations"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
               "Accept": "application/json"}
    ids = []
    for body in fault_annotations(view, dashboard_uid):
        answer = _send("POST", url, json.dumps(body).encode("utf-8"), headers)
        try:
            ids.append(int(json.loads(answer)["id"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise RaychaosError(f"POST {url}: the answer is not Grafana's (no annotation id): "
                                f"{answer[:200]!r}") from exc
    return ids
