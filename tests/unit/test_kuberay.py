"""The KubeRay example (``examples/kuberay``): what can be checked without Kubernetes.

No test here starts Ray, a container or a cluster. They check that both manifests parse as
the KubeRay objects the cluster guide describes, with the fields it relies on; that their
Ray and the image's are this project's; that the job's entrypoint is a ``fleetrl train``
command the CLI accepts, screened as ``fleetrl train`` screens it before torch; that its
fleet fits the cluster's node group; and that the guide shows the files as they are.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from docblocks import blocks
from fleetrl.cli import build_parser
from fleetrl.fleet_size import FleetSize
from fleetrl.setup.screen import screen_file
from fleetrl.setup.shipped import CONFIG_DIR, config_path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "kuberay"
GUIDE = ROOT / "docs" / "guides" / "cluster.md"
SECTION = "## On Kubernetes with KubeRay"
MANIFESTS = ("raycluster.yaml", "rayjob.yaml")
#: an image tag in the rayproject/ray style: RAY_VERSION-pyXY-cpu
IMAGE_TAG = re.compile(r":(?P<ray>\d+\.\d+\.\d+)-py(?P<py>\d+)-cpu$")


def documents(name: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((EXAMPLES / name).read_text()))


def manifest(name: str) -> dict[str, Any]:
    (doc,) = documents(name)
    return doc


def cluster_spec(name: str) -> dict[str, Any]:
    """The RayCluster spec of a manifest: the cluster's own, or the one the job makes."""
    spec = manifest(name)["spec"]
    return spec["rayClusterSpec"] if name == "rayjob.yaml" else spec


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    return [c for g in groups for c in g["template"]["spec"]["containers"]]


def major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def entrypoint() -> list[str]:
    return shlex.split(manifest("rayjob.yaml")["spec"]["entrypoint"])


def screened(words: list[str]):
    """The config ``fleetrl train`` runs for the command line ``words`` (after ``fleetrl``):
    parsed by the CLI's own parser, then screened as the CLI screens it, before torch."""
    args, extra = build_parser()[0].parse_known_args(words)
    assert args.command == "train" and not args.resume and not args.run_dir
    assert all("=" in e and not e.startswith("-") for e in extra), extra
    return args.config, screen_file(args.config, [*args.overrides, *extra])


def section() -> str:
    text = GUIDE.read_text()
    assert SECTION in text
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


def section_blocks():
    start = GUIDE.read_text().split(SECTION, 1)[0].count("\n") + 1
    end = start + section().count("\n")
    return [b for b in blocks(GUIDE) if start <= b.line <= end]


# --- the manifests ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind"), [("raycluster.yaml", "RayCluster"), ("rayjob.yaml", "RayJob")]
)
def test_each_manifest_is_one_kuberay_object(name, kind):
    docs = documents(name)
    assert len(docs) == 1
    assert (docs[0]["apiVersion"], docs[0]["kind"]) == ("ray.io/v1", kind)
    assert docs[0]["metadata"]["name"]


@pytest.mark.parametrize("name", MANIFESTS)
def test_the_head_offers_no_cpu_so_no_collector_lands_beside_the_learner(name):
    head = cluster_spec(name)["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"  # a string: KubeRay passes it to ray start


@pytest.mark.parametrize("name", MANIFESTS)
def test_the_collector_nodes_autoscale_and_advertise_the_collector_resource(name):
    spec = cluster_spec(name)
    assert spec["enableInTreeAutoscaling"] is True
    (group,) = spec["workerGroupSpecs"]
    assert (group["minReplicas"], group["replicas"], group["maxReplicas"]) == (1, 1, 8)
    params = group["rayStartParams"]
    # ray start --resources=VALUE, through a shell: the value is a quoted JSON string
    (resources,) = shlex.split(params["resources"])
    assert json.loads(resources) == {"collector": 4}
    assert params["num-cpus"] == "4"  # one collector a CPU, as the resource says


@pytest.mark.parametrize("name", MANIFESTS)
def test_every_pod_asks_for_what_it_may_use(name):
    for container in containers(cluster_spec(name)):
        resources = container["resources"]
        assert resources["requests"] == resources["limits"], container["name"]
        assert set(resources["limits"]) == {"cpu", "memory"}
    (worker,) = containers(cluster_spec(name))[1:]
    # 4 collector processes of about 450 MB, Ray's raylet and agent, its object store
    assert worker["resources"]["limits"] == {"cpu": "4", "memory": "6Gi"}


def test_the_job_makes_the_cluster_of_raycluster_yaml_and_deletes_it_after_the_run():
    job = manifest("rayjob.yaml")["spec"]
    assert job["rayClusterSpec"] == manifest("raycluster.yaml")["spec"]
    assert "clusterSelector" not in job
    assert job["shutdownAfterJobFinishes"] is True


@pytest.mark.parametrize("name", MANIFESTS)
def test_the_manifests_ray_is_the_installed_one(name):
    spec = cluster_spec(name)
    ray = importlib.metadata.version("ray")
    assert major_minor(spec["rayVersion"]) == major_minor(ray)
    images = {c["image"] for c in containers(spec)}
    assert len(images) == 1  # every pod runs one image: one Ray, one fleetrl
    tag = IMAGE_TAG.search(images.pop())
    assert tag and tag["ray"] == spec["rayVersion"]


# --- the job's command -----------------------------------------------------------------


def test_the_jobs_entrypoint_trains_a_shipped_config(tmp_path, monkeypatch):
    words = entrypoint()
    assert words[:2] == ["fleetrl", "train"]
    monkeypatch.chdir(tmp_path)  # no local file of the config's name: the shipped one
    name, config = screened(words[1:])
    assert config_path(name) == CONFIG_DIR / f"{name}.yaml"
    assert config_path(name).exists()
    assert (config.algorithm, config.env.id) == ("appo", "CartPole-v1")
    assert config.collector.sync is False
    assert config.trainer.total_frames == 2_000_000


def test_the_jobs_entrypoint_asks_for_an_elastic_fleet_of_2_to_8(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, config = screened(entrypoint()[1:])
    assert config.collector.fleet == FleetSize(min=2, max=8)
    assert config.uses_ray


def test_the_jobs_run_attaches_to_its_cluster_and_writes_on_the_volume(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, config = screened(entrypoint()[1:])
    assert config.collector.address == "auto"  # RAY_ADDRESS, which Ray sets in a job
    head = cluster_spec("rayjob.yaml")["headGroupSpec"]["template"]["spec"]
    (mount,) = head["containers"][0]["volumeMounts"]
    (volume,) = head["volumes"]
    assert mount["name"] == volume["name"] and "persistentVolumeClaim" in volume
    assert Path(config.logging.run_dir).parent == Path(mount["mountPath"])


def test_the_fleet_fits_the_node_group(tmp_path, monkeypatch):
    """Its minimum on the nodes the cluster starts with (fleetrl refuses a run whose workers
    cannot fit the cluster), its maximum on the most nodes the autoscaler may add."""
    monkeypatch.chdir(tmp_path)
    _, config = screened(entrypoint()[1:])
    (group,) = cluster_spec("rayjob.yaml")["workerGroupSpecs"]
    per_node = float(group["rayStartParams"]["num-cpus"])
    per_collector = config.collector.num_cpus_per_collector
    fleet = config.collector.fleet
    assert fleet.min * per_collector <= group["minReplicas"] * per_node
    assert fleet.max * per_collector <= group["maxReplicas"] * per_node


# --- the guide -------------------------------------------------------------------------


@pytest.mark.parametrize("name", MANIFESTS)
def test_the_guide_shows_each_manifest_as_it_is(name):
    shown = [b.code for b in section_blocks() if b.lang == "yaml"]
    assert (EXAMPLES / name).read_text() in shown


def test_the_guides_dockerfile_installs_cpu_torch_first_on_the_manifests_ray_image():
    (dockerfile,) = [b.code for b in section_blocks() if b.lang == "dockerfile"]
    lines = [line for line in dockerfile.splitlines() if not line.startswith("#")]
    base = lines[0].removeprefix("FROM ")
    assert base.startswith("rayproject/ray:")
    image = containers(cluster_spec("raycluster.yaml"))[0]["image"]
    assert IMAGE_TAG.search(base)[0] == IMAGE_TAG.search(image)[0]
    installs = [line for line in lines if line.startswith("RUN pip install")]
    torch = importlib.metadata.version("torch").split("+")[0]
    assert installs[0].startswith(f"RUN pip install torch=={torch} ")
    assert "/whl/cpu" in installs[0]
    fleetrl = importlib.metadata.version("fleetrl")
    assert f"fleetrl-{fleetrl}-py3-none-any.whl[atari]" in installs[1]
    assert f"docker build -t {image} ." in section()


def test_the_guides_commands_name_the_jobs_files_and_run_dir(tmp_path, monkeypatch):
    text = section()
    assert "kubectl apply -f examples/kuberay/rayjob.yaml" in text
    assert "kubectl get rayjobs" in text
    assert f"kubectl logs -f job/{manifest('rayjob.yaml')['metadata']['name']}" in text
    monkeypatch.chdir(tmp_path)
    _, config = screened(entrypoint()[1:])
    resume = f"fleetrl train --resume {config.logging.run_dir}"
    assert resume in text
    args = build_parser()[0].parse_args(shlex.split(resume)[1:])
    assert args.resume == config.logging.run_dir


def test_the_guides_command_for_the_long_lived_cluster_is_valid(tmp_path, monkeypatch):
    (shell,) = [b.code for b in section_blocks() if "ray job submit" in b.code]
    submit = shlex.split(shell.split("ray job submit", 1)[1].replace("\\\n", " "))
    monkeypatch.chdir(tmp_path)
    _, config = screened(submit[submit.index("--") + 2 :])
    assert config.collector.fleet == FleetSize(min=2, max=8)
    assert config.collector.address == "auto"
