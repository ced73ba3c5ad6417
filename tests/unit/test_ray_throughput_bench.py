"""The scaling series of ``benchmarks/ray_throughput.py``: its collector counts, its rows
and its plot (no Ray here: the rounds' frames/s are given)."""

from __future__ import annotations

import argparse

import pytest

from common import plot_ray_scaling
from ray_throughput import NUM_COLLECTORS, collector_counts, scaling_rows


def test_the_counts_are_sorted_unique_and_hold_the_main_tables():
    assert collector_counts("8, 1,4,1") == [1, NUM_COLLECTORS, 4, 8]
    assert collector_counts(str(NUM_COLLECTORS)) == [NUM_COLLECTORS]


@pytest.mark.parametrize("text", ["0,2", "", "two", "1,-2"])
def test_counts_below_one_or_not_numbers_are_refused_by_the_argument(text):
    with pytest.raises(argparse.ArgumentTypeError) as err:
        collector_counts(text)
    assert str(err.value) == (
        f"--collectors {text!r}: give collector counts of 1 or more, separated by commas "
        "(e.g. 1,2,4)"
    )


def test_each_count_is_paired_with_its_own_limit_round_by_round():
    runs = {
        # the main table's count, without a suffix
        "limit": [100.0, 200.0, 150.0],
        "fleetrl_async": [90.0, 100.0, 150.0],  # rounds: 0.9, 0.5, 1.0
        "torchrl_async": [30.0, 50.0, 50.0],
        # one collector: its own limit
        "limit_x1": [50.0, 40.0, 60.0],
        "fleetrl_async_x1": [45.0, 40.0, 30.0],  # rounds: 0.9, 1.0, 0.5
        "torchrl_async_x1": [15.0, 10.0, 20.0],
    }
    one, two = scaling_rows(runs, [1, NUM_COLLECTORS])
    assert one == {
        "collectors": 1,
        "limit_fps": 50.0,
        "fleetrl_async_fps": 40.0,
        "torchrl_async_fps": 15.0,
        "fleetrl_vs_limit": 0.9,
        "torchrl_vs_limit": pytest.approx(0.3),
        "fleetrl_vs_torchrl": 3.0,
    }
    assert two["collectors"] == NUM_COLLECTORS
    assert (two["limit_fps"], two["fleetrl_async_fps"], two["torchrl_async_fps"]) == (
        150.0,
        100.0,
        50.0,
    )
    assert two["fleetrl_vs_limit"] == 0.9  # the median of the rounds' ratios
    assert two["fleetrl_vs_torchrl"] == 3.0


def test_a_contestant_that_failed_leaves_its_cells_empty():
    runs = {"limit": [100.0], "fleetrl_async": [90.0]}  # torchrl's did not start
    (row,) = scaling_rows(runs, [NUM_COLLECTORS])
    assert row["torchrl_async_fps"] is None
    assert row["torchrl_vs_limit"] is row["fleetrl_vs_torchrl"] is None
    assert row["fleetrl_vs_limit"] == 0.9


def test_the_plot_draws_every_count_and_the_same_rows_the_same_bytes(tmp_path):
    pytest.importorskip("matplotlib")
    runs = {
        "limit": [100.0],
        "fleetrl_async": [90.0],
        "torchrl_async": [30.0],
        "limit_x1": [50.0],
        "fleetrl_async_x1": [45.0],
        "torchrl_async_x1": [15.0],
    }
    rows = scaling_rows(runs, [1, NUM_COLLECTORS])
    first = plot_ray_scaling(rows, tmp_path / "a")
    again = plot_ray_scaling(rows, tmp_path / "b")
    assert first.name == "ray_throughput.png"
    assert first.read_bytes() == again.read_bytes()
    assert plot_ray_scaling([], tmp_path / "c") is None
