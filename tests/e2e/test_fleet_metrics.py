"""A RayCollector's per-worker metrics, scraped from Ray's Prometheus endpoint during a run."""

from __future__ import annotations

import re
import time
import urllib.request

import pytest

from fakes import counting
from fleetrl import RayCollector
from fleetrl.collectors.remote.fleet_metrics import METRICS

pytestmark = pytest.mark.usefixtures("ray_session")

#: Ray exports each metric under its name prefixed "ray_", every few seconds
SCRAPE_WAIT_S = 60.0


def _scrape() -> str:
    import ray

    text = ""
    for node in ray.nodes():
        if node["Alive"]:
            address = f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
            text += urllib.request.urlopen(address, timeout=5).read().decode()
    return text


def _series(text: str, name: str, collector: str) -> list[tuple[dict[str, str], float]]:
    """Each sample of ``ray_<name>`` (a counter's: ``ray_<name>_total``) of one collector:
    labels and value."""
    found = []
    for line in text.splitlines():
        match = re.match(rf"ray_{name}(?:_total)?\{{(.*)\}} (\S+)$", line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
            if labels.get("collector") == collector:  # not an earlier collector's series
                found.append((labels, float(match.group(2))))
    return found


def test_each_worker_exports_its_series_tagged_with_collector_worker_and_node():
    import ray

    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    with RayCollector(
        counting(5, sleep=0.001),
        None,
        frames_per_batch=50,
        total_frames=-1,
        num_collectors=2,
        sync=False,
    ) as collector:
        served = 0
        deadline = time.monotonic() + SCRAPE_WAIT_S
        found: dict[str, list] = {}
        for batch in collector:  # scraped during the run, while the workers collect
            served += batch.numel()
            tag = collector.fleet_metrics.tag
            text = _scrape()
            found = {name: _series(text, name, tag) for name in METRICS}
            workers = {labels["worker"] for labels, _ in found["fleetrl_collector_frames"]}
            if workers == {"0", "1"} and all(found.values()):
                break
            assert time.monotonic() < deadline, f"not exported within {SCRAPE_WAIT_S} s"
        stats = collector.stats()
    for name, samples in found.items():
        for labels, value in samples:
            assert labels["worker"] in ("0", "1"), (name, labels)
            assert labels["node"] in nodes, (name, labels)
            assert value >= 0, (name, value)
    frames = {labels["worker"]: value for labels, value in found["fleetrl_collector_frames"]}
    # exported up to the last report, at most what was served by then
    assert 0 < sum(frames.values()) <= served
    restarts = {labels["worker"]: v for labels, v in found["fleetrl_collector_restarts"]}
    assert (
        restarts == {"0": 0.0, "1": 0.0} == {str(k): float(v) for k, v in stats["restarts"].items()}
    )
    assert all(v > 0 for _, v in found["fleetrl_collector_frames_per_s"])
    assert all(0 < v < 1 for _, v in found["fleetrl_collector_env_step_s"])
