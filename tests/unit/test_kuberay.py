"""The KubeRay example (examples/kuberay): what can be checked without a Kubernetes cluster.
The manifests parse as the KubeRay objects the guide describes, their Ray is this
project's, and the job's command is a valid fleetrl config; and the guide shows them."""

from __future__ import annotations

import importlib.metadata
import shlex

import pytest
import yaml

from fleetrl.setup.screen import screen_file
from fleetrl.setup.shipped import config_path
from runs import ROOT

EXAMPLES = ROOT / "examples" / "kuberay"
GUIDE = ROOT / "docs" / "guides" / "cluster.md"


def manifest(name: str) -> dict:
    (doc,) = list(yaml.safe_load_all((EXAMPLES / name).read_text()))
    return doc


def cluster_specs():
    return {
        "raycluster.yaml": manifest("raycluster.yaml")["spec"],
        "rayjob.yaml": manifest("rayjob.yaml")["spec"]["rayClusterSpec"],
    }


def test_the_manifests_are_kuberay_objects():
    assert manifest("raycluster.yaml")["apiVersion"] == "ray.io/v1"
    assert manifest("raycluster.yaml")["kind"] == "RayCluster"
    job = manifest("rayjob.yaml")
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    assert job["spec"]["shutdownAfterJobFinishes"] is True


@pytest.mark.parametrize("name", ["raycluster.yaml", "rayjob.yaml"])
def test_the_cluster_autoscales_its_collector_nodes_and_keeps_the_head_for_the_learner(name):
    spec = cluster_specs()[name]
    assert spec["enableInTreeAutoscaling"] is True
    assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    (group,) = spec["workerGroupSpecs"]
    assert 1 <= group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    assert int(group["rayStartParams"]["num-cpus"]) >= 1
    # the Ray of the image is this project's (a cluster refuses another version's nodes)
    major_minor = ".".join(importlib.metadata.version("ray").split(".")[:2])
    assert spec["rayVersion"].startswith(major_minor)


def test_the_jobs_command_is_a_valid_fleetrl_run(tmp_path, monkeypatch):
    words = shlex.split(manifest("rayjob.yaml")["spec"]["entrypoint"])
    assert words[:2] == ["fleetrl", "train"]
    name, rest = words[2], words[3:]
    assert config_path(name).parent.name == "configs"  # a shipped config
    overrides = [w for w in rest if "=" in w and not w.startswith("--")]
    assert rest[rest.index("--run-dir") + 1].startswith("/runs/")  # on the volume
    monkeypatch.chdir(tmp_path)  # no local file of that name
    config = screen_file(name, overrides)  # every rule that needs no env or cluster
    assert str(config.collector.fleet) == "2-8"
    assert config.uses_ray


def test_the_guide_shows_the_manifests_as_they_are():
    text = GUIDE.read_text()
    for name in ("raycluster.yaml", "rayjob.yaml"):
        assert f"examples/kuberay/{name}" in text
    assert manifest("rayjob.yaml")["spec"]["entrypoint"].split()[2] in text


def test_the_guide_shows_the_job_as_it_is_in_the_repository():
    assert (EXAMPLES / "rayjob.yaml").read_text() in GUIDE.read_text()
