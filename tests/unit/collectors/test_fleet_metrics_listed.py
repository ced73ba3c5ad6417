"""The exported series are the ones the metrics reference lists."""

from __future__ import annotations

import re

from fleetrl.collectors.remote.fleet_metrics import METRICS, TAGS
from runs import ROOT


def test_the_metrics_reference_lists_every_series_with_its_kind():
    page = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    rows = dict(re.findall(r"^\| `(fleetrl_collector_\w+)` \| (counter|gauge) \|", page, re.M))
    assert rows == {name: kind for name, (kind, _) in METRICS.items()}
    assert TAGS == ("collector", "worker", "node")
    assert all(f"`{tag}`" in page for tag in TAGS)
