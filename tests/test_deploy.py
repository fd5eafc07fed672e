"""The deployment files, checked against what runs them: the KubeRay manifests against KubeRay's own
CRD schemas (fields they do not declare rejected, as the API server would prune them), the VM
cluster config against Ray's cluster schema, the Serve config against Serve's, every command
against the CLI's argument parser or Ray's, and the compose stack. No Ray, Serve or Docker runs."""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from agent_memory.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "cluster" / "k8s"
AUTOSCALER = ROOT / "cluster" / "autoscaler-aws.yaml"
VM_ENV = ROOT / "cluster" / "vm.env.example"
SERVE_CONFIG = ROOT / "cluster" / "serve_config.yaml"
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
CRDS = Path(__file__).parent / "data" / "kuberay-crds"
PRESERVE = "x-kubernetes-preserve-unknown-fields"
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the CRDs are megabytes: libyaml when present
VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]  # type: ignore[index]
APP_IMAGE = f"agent-memory:{VERSION}"

# The top-level metadata of any object: the API server checks it as ObjectMeta, not through the
# CRD's schema (which only says `type: object`). The fields these manifests may use.
OBJECT_META = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
        "generateName": {"type": "string", "pattern": "^[a-z]([-a-z0-9]*[a-z0-9])?-$"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "additionalProperties": False,
}
# Kinds of Kubernetes itself: checked for their shape only (no server schema here).
STANDARD_KINDS = {
    ("v1", "ConfigMap"): {"data": {"type": "object", "additionalProperties": {"type": "string"}},
                          "immutable": {"type": "boolean"}},
    ("v1", "Secret"): {"data": {"type": "object", "additionalProperties": {"type": "string"}},
                       "stringData": {"type": "object", "additionalProperties": {"type": "string"}},
                       "type": {"type": "string"}, "immutable": {"type": "boolean"}},
}


# --- KubeRay manifests ------------------------------------------------------------------------

def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of a structural schema whose objects reject fields they do not declare, as the API
    server prunes them, except where the schema allows them (additionalProperties) or preserves
    unknown fields."""
    node = dict(schema)
    if "properties" in node:
        node["properties"] = {name: strict(sub) for name, sub in node["properties"].items()}
    if isinstance(node.get("items"), dict):
        node["items"] = strict(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = strict(node["additionalProperties"])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in node:
            node[key] = [strict(sub) for sub in node[key]]
    if node.get("type") == "object" and "additionalProperties" not in node and not node.get(PRESERVE):
        node["additionalProperties"] = False
    return node


def with_identity(schema: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """A kind's schema that also requires its own apiVersion and kind, and checks metadata as ObjectMeta."""
    schema = copy.deepcopy(schema)
    schema.setdefault("properties", {}).update(
        {"apiVersion": {"enum": [api_version]}, "kind": {"enum": [kind]}, "metadata": OBJECT_META}
    )
    schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})
    return schema


@functools.cache
def crds() -> list[dict[str, Any]]:
    return [yaml.load(path.read_text(), Loader=LOADER) for path in sorted(CRDS.glob("ray.io_*.yaml"))]


@functools.cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the CRD's served schema, made strict."""
    schemas = {}
    for crd in crds():
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                api_version = f"{group}/{version['name']}"
                raw = version["schema"]["openAPIV3Schema"]
                schemas[(api_version, kind)] = strict(with_identity(raw, api_version, kind))
    return schemas


def raw_crd_schema(kind: str) -> dict[str, Any]:
    """The v1 schema of a KubeRay kind, as the CRD has it."""
    crd = next(crd for crd in crds() if crd["spec"]["names"]["kind"] == kind)
    return next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]


def rejection(doc: dict[str, Any]) -> str:
    """Why the schema rejects `doc` (its message only: the error's text would print the schema)."""
    with pytest.raises(jsonschema.ValidationError) as info:
        validate(doc)
    return info.value.message


def schema_for(doc: dict[str, Any]) -> dict[str, Any]:
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in STANDARD_KINDS:
        api_version, kind = key
        return strict(with_identity({"type": "object", "properties": dict(STANDARD_KINDS[key])}, api_version, kind))
    if key not in crd_schemas():
        pytest.fail(f"no schema for {key}: add its CRD to tests/data/kuberay-crds or its shape to STANDARD_KINDS")
    return crd_schemas()[key]  # type: ignore[index]


def validate(doc: dict[str, Any]) -> None:
    jsonschema.Draft4Validator(schema_for(doc)).validate(doc)


def k8s_documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [(f"{path.name}#{i}", doc) for i, doc in enumerate(yaml.safe_load_all(path.read_text())) if doc]
    return docs


def k8s_document(name: str) -> dict[str, Any]:
    return next(doc for key, doc in k8s_documents() if key == name)


def ray_clusters() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every Ray cluster spec in the manifests: the RayService's, and those of the jobs."""
    for name, doc in k8s_documents():
        spec = doc.get("spec", {})
        if doc["kind"] == "RayService":
            yield name, spec["rayClusterConfig"]
        elif doc["kind"] == "RayJob":
            yield name, spec["rayClusterSpec"]
        elif doc["kind"] == "RayCronJob":
            yield name, spec["jobTemplate"]["rayClusterSpec"]


def ray_containers(cluster: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(group, pod spec, container) of the Ray container of the head and of each worker group."""
    groups = [("head", cluster["headGroupSpec"])] + [(g["groupName"], g) for g in cluster.get("workerGroupSpecs", [])]
    for group, spec in groups:
        pod = spec["template"]["spec"]
        yield group, pod, pod["containers"][0]


@pytest.mark.parametrize(("name", "doc"), k8s_documents(), ids=[name for name, _ in k8s_documents()])
def test_manifest_validates_against_its_schema(name: str, doc: dict[str, Any]) -> None:
    validate(doc)


UNKNOWN_FIELD_PATHS = [
    ("rayservice.yaml#0", ["spec"]),
    ("rayservice.yaml#0", ["spec", "rayClusterConfig"]),
    ("rayservice.yaml#0", ["spec", "rayClusterConfig", "workerGroupSpecs", 0]),
    ("rayservice.yaml#0", ["spec", "rayClusterConfig", "workerGroupSpecs", 0, "template", "spec", "containers", 0]),
    ("rayservice.yaml#0", ["spec", "rayClusterConfig", "workerGroupSpecs", 0, "template", "spec", "containers", 0,
                           "readinessProbe", "httpGet"]),
    ("rayservice.yaml#0", ["spec", "rayClusterConfig", "headGroupSpec", "template", "spec", "volumes", 0, "secret"]),
    ("rayservice.yaml#0", ["metadata"]),
    ("consolidation-raycronjob.yaml#0", ["spec"]),
    ("consolidation-raycronjob.yaml#0", ["spec", "jobTemplate"]),
    ("consolidation-raycronjob.yaml#0", ["spec", "jobTemplate", "rayClusterSpec", "authOptions"]),
    ("import-rayjob.yaml#0", ["spec", "rayClusterSpec", "headGroupSpec"]),
    ("settings-configmap.yaml#0", []),
]


@pytest.mark.parametrize(("name", "path"), UNKNOWN_FIELD_PATHS, ids=[f"{n}:{'.'.join(map(str, p)) or '<top>'}"
                                                                   for n, p in UNKNOWN_FIELD_PATHS])
def test_a_field_the_schema_does_not_declare_is_rejected(name: str, path: list[Any]) -> None:
    doc = copy.deepcopy(k8s_document(name))
    node = doc
    for step in path:
        node = node[step]
    node["shutdownAfterJobFinish"] = True  # a plausible typo, declared nowhere at these places
    assert "'shutdownAfterJobFinish' was unexpected" in rejection(doc)


def test_a_misspelt_field_is_rejected_and_a_wrong_type_too() -> None:
    doc = copy.deepcopy(k8s_document("rayservice.yaml#0"))
    worker = doc["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    container = worker["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    assert "'readinesProbe' was unexpected" in rejection(doc)
    doc = copy.deepcopy(k8s_document("rayservice.yaml#0"))
    doc["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["maxReplicas"] = "6"
    assert rejection(doc) == "'6' is not of type 'integer'"


def test_strict_rejects_undeclared_fields_except_where_the_schema_keeps_them() -> None:
    schema = strict({"type": "object", "properties": {
        "fixed": {"type": "object", "properties": {"a": {"type": "string"}}},
        "open": {"type": "object", PRESERVE: True},
        "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {"b": {"type": "integer"}}}},
        "list": {"type": "array", "items": {"type": "object", "properties": {"c": {"type": "string"}}}},
    }})
    check = jsonschema.Draft4Validator(schema).is_valid
    assert check({"fixed": {"a": "x"}, "open": {"anything": {"goes": 1}}, "map": {"k": {"b": 1}}, "list": [{"c": "y"}]})
    assert not check({"fixed": {"a": "x", "z": 1}})
    assert not check({"map": {"k": {"b": 1, "z": 1}}})
    assert not check({"list": [{"c": "y", "z": 1}]})
    assert not check({"top": 1})


def test_no_cel_rule_of_the_crds_applies_to_these_manifests() -> None:
    """The CRDs' x-kubernetes-validations (CEL) are checked by the API server, not by jsonschema:
    none lies on a field these manifests set, so the schema check above is the whole of it."""
    def rules(value: Any, schema: dict[str, Any], where: str) -> Iterator[str]:
        if "x-kubernetes-validations" in schema:
            yield where
        if isinstance(value, dict):
            for key, sub in value.items():
                child = schema.get("properties", {}).get(key) or schema.get("additionalProperties")
                if isinstance(child, dict):
                    yield from rules(sub, child, f"{where}.{key}")
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            for i, sub in enumerate(value):
                yield from rules(sub, schema["items"], f"{where}[{i}]")

    found = [f"{name}: {where}" for name, doc in k8s_documents() if doc["apiVersion"] == "ray.io/v1"
             for where in rules(doc, raw_crd_schema(doc["kind"]), "")]
    assert found == []


def test_kubernetes_names_are_dns_labels_and_ray_checks_pass() -> None:
    """What KubeRay's operator checks beyond the schema (ray-operator/controllers/ray/utils/validation.go)."""
    for name, doc in k8s_documents():
        meta = doc["metadata"]
        assert "name" in meta or ("generateName" in meta and doc["kind"] == "RayJob"), name
    for name, cluster in ray_clusters():
        assert cluster["authOptions"]["mode"] == "token", f"{name}: Ray token authentication"
        assert tuple(map(int, cluster["rayVersion"].split("."))) >= (2, 52, 0), f"{name}: token auth needs Ray 2.52+"
        for group, _pod, container in ray_containers(cluster):
            assert container["image"], f"{name}/{group}"
        for group in cluster.get("workerGroupSpecs", []):
            assert group["minReplicas"] <= group.get("replicas", group["minReplicas"]) <= group["maxReplicas"], name
            assert "resources" not in group, f"{name}/{group['groupName']}: resources in rayStartParams or the group, not both"
    for name, doc in k8s_documents():
        if doc["kind"] in ("RayJob", "RayCronJob"):
            job = doc["spec"]["jobTemplate"] if doc["kind"] == "RayCronJob" else doc["spec"]
            assert not job.get("ttlSecondsAfterFinished") or job["shutdownAfterJobFinishes"], name
            assert job["activeDeadlineSeconds"] > 0 and job["backoffLimit"] >= 0, name
    cron = k8s_document("consolidation-raycronjob.yaml#0")["spec"]
    assert len(cron["schedule"].split()) == 5  # KubeRay parses it as a standard five-field cron line


def test_ray_version_and_images_are_the_pinned_releases() -> None:
    import ray

    for name, cluster in ray_clusters():
        assert cluster["rayVersion"].split(".")[:2] == ray.__version__.split(".")[:2], name
        for group, _pod, container in ray_containers(cluster):
            assert container["image"] == APP_IMAGE, f"{name}/{group}"
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["images"] == [{"name": "agent-memory", "newTag": VERSION}]


def test_kustomization_applies_the_serving_stack() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["settings-configmap.yaml", "rayservice.yaml", "consolidation-raycronjob.yaml"]
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed here: `kubectl kustomize` not run")
    built = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    docs = [doc for doc in yaml.safe_load_all(built.stdout) if doc]
    assert sorted(doc["kind"] for doc in docs) == ["ConfigMap", "RayCronJob", "RayService"]
    for doc in docs:
        validate(doc)


def test_the_serving_cluster_is_secured_and_probed_on_every_node() -> None:
    service = k8s_document("rayservice.yaml#0")["spec"]
    cluster = service["rayClusterConfig"]
    assert service["excludeHeadPodFromServeSvc"] is True
    assert cluster["enableInTreeAutoscaling"] is True
    groups = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    assert groups["cpu"]["maxReplicas"] > groups["cpu"]["minReplicas"] >= 1
    gpu = groups["gpu"]
    assert gpu["replicas"] == gpu["minReplicas"] == 0
    gpu_container = gpu["template"]["spec"]["containers"][0]
    assert gpu_container["resources"]["limits"]["nvidia.com/gpu"] == 1
    for group, pod, container in ray_containers(cluster):
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        keys_dir = os.path.dirname(env["AGENT_MEMORY_API_KEYS_FILE"])
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        mount = mounts[keys_dir]
        assert mount.get("readOnly") and "subPath" not in mount, f"{group}: a subPath mount never sees a changed Secret"
        volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        assert volume["secret"]["secretName"] == "agent-memory-api-keys"
        assert {"configMapRef": {"name": "agent-memory-settings"}} in container["envFrom"]
        assert {"secretRef": {"name": "agent-memory-storage", "optional": True}} in container["envFrom"]
        probe = container.get("readinessProbe")
        if group == "head":
            # KubeRay deploys the Serve app only once the head pod is ready: a /readyz probe there
            # would wait for an app that is never deployed. The head keeps KubeRay's own probe.
            assert probe is None
        else:
            assert probe["httpGet"] == {"path": "/readyz", "port": 8000}, group


def test_every_job_cluster_reads_the_same_settings() -> None:
    for name, cluster in ray_clusters():
        for group, _pod, container in ray_containers(cluster):
            assert container["envFrom"][:2] == [{"configMapRef": {"name": "agent-memory-settings"}},
                                                {"secretRef": {"name": "agent-memory-storage", "optional": True}}], \
                f"{name}/{group}"


def test_the_one_off_consolidation_is_the_cronjobs_job() -> None:
    cron = k8s_document("consolidation-raycronjob.yaml#0")
    once = k8s_document("consolidation-rayjob.yaml#0")
    assert once["spec"] == cron["spec"]["jobTemplate"]
    assert once["metadata"]["labels"] == cron["metadata"]["labels"]


def test_the_inline_serve_config_is_the_cluster_serve_config() -> None:
    inline = yaml.safe_load(k8s_document("rayservice.yaml#0")["spec"]["serveConfigV2"])
    expected = yaml.safe_load(SERVE_CONFIG.read_text())
    expected["http_options"]["host"] = "0.0.0.0"  # KubeRay's proxies must listen on the pod's address
    assert inline == expected


@pytest.mark.parametrize("source", ["cluster/serve_config.yaml", "rayservice.yaml serveConfigV2"])
def test_serve_config_validates_against_serves_schema(source: str) -> None:
    from ray.serve.schema import (
        DeploymentSchema,
        HTTPOptionsSchema,
        ServeApplicationSchema,
        ServeDeploySchema,
    )

    if source.startswith("cluster/"):
        config = yaml.safe_load(SERVE_CONFIG.read_text())
    else:
        config = yaml.safe_load(k8s_document("rayservice.yaml#0")["spec"]["serveConfigV2"])
    ServeDeploySchema.model_validate(config)
    # Serve's schema ignores fields it does not know; a typo would be ignored too.
    assert set(config) <= set(ServeDeploySchema.model_fields)
    assert set(config["http_options"]) <= set(HTTPOptionsSchema.model_fields)
    for app in config["applications"]:
        assert set(app) <= set(ServeApplicationSchema.model_fields)
        for deployment in app["deployments"]:
            assert set(deployment) <= set(DeploymentSchema.model_fields), deployment["name"]
    module, attr = config["applications"][0]["import_path"].split(":")
    assert callable(getattr(__import__(module, fromlist=[attr]), attr))


def test_the_configmap_holds_real_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    data = k8s_document("settings-configmap.yaml#0")["data"]
    settings = settings_from(data, monkeypatch, tmp_path)
    assert settings.value("storage_uri").startswith("s3://")
    assert settings.value("storage_options") == {"aws_region": "us-east-1"}
    assert settings.value("consolidation_schedule_enabled") is False  # the RayCronJob consolidates


# --- commands ---------------------------------------------------------------------------------

# Programs whose arguments no parser here can check, and why.
NOT_PARSED = {
    "mc": "MinIO's client: not installed here; its commands follow MinIO's documentation",
    "minio": "the MinIO image's own entrypoint",
    "curl": "the app image installs curl (checked against the Dockerfile); the flags are curl's",
    "pip": "installs the app; the same steps as the Dockerfile",
    "apt-get": "the VM image's package manager",
    "python3": "makes the VM's virtual environment",
    "test": "shell", "kill": "shell", "cat": "shell", "ulimit": "shell", "set": "shell", ".": "shell",
    "echo": "shell", "grep": "shell", "sudo": "shell", "true": "shell",
}
SEPARATORS = {"&&", "||", ";", "&", "|", "(", ")", "{", "}", ";;"}
# Images whose entrypoint takes a compose `command` as its arguments (MinIO's runs `minio "$@"`).
IMAGE_ENTRYPOINTS = {"quay.io/minio/minio": ["minio"]}


def simple_commands(script: str) -> list[list[str]]:
    """The simple commands of a shell line: argv lists without their redirections, leading
    variable assignments and `exec`/`nohup`/`sudo` wrappers."""
    script = re.sub(r"(?<=\s)\d+(?=[<>])", "", script)  # the file descriptor of `2>&1`
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    tokens = list(lexer)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in SEPARATORS:
            commands.append([])
        elif set(token) <= set("<>&") and ("<" in token or ">" in token):
            i += 1  # the redirection's target
        else:
            commands[-1].append(token)
        i += 1
    out = []
    for argv in commands:
        while argv and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[0]) or argv[0] in ("exec", "nohup", "sudo")):
            argv = argv[1:]
        if argv:
            out.append(argv)
    return out


def compose_scripts(service: dict[str, Any]) -> list[list[str] | str]:
    """A compose service's command and health check, each an argv or a shell script."""
    out: list[list[str] | str] = []
    entrypoint = service.get("entrypoint") or []
    command = service.get("command")
    if isinstance(command, str):
        command = shlex.split(command)
    argv = [*entrypoint, *(command or [])]
    if len(argv) >= 3 and os.path.basename(argv[0]) in ("sh", "bash") and argv[1] == "-c":
        out.append(argv[2].replace("$$", "$"))
    elif argv:
        image_entrypoint = [] if entrypoint else IMAGE_ENTRYPOINTS.get(service["image"].rpartition(":")[0], [])
        out.append([*image_entrypoint, *argv])
    test = (service.get("healthcheck") or {}).get("test")
    if test and test[0] == "CMD":
        out.append(test[1:])
    elif test and test[0] == "CMD-SHELL":
        out.append(test[1])
    return out


def autoscaler_scripts(config: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for key in ("initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
                "head_start_ray_commands", "worker_start_ray_commands"):
        for script in config.get(key) or []:
            yield key, script
    for name, node_type in config["available_node_types"].items():
        for key in ("initialization_commands", "worker_setup_commands"):
            for script in node_type.get(key) or []:
                yield f"{name}.{key}", script


def every_command() -> list[tuple[str, list[str]]]:
    """(where, argv) of every command that the deployment files run."""
    found: list[tuple[str, list[str]]] = []
    for name, doc in k8s_documents():
        job = doc["spec"]["jobTemplate"] if doc["kind"] == "RayCronJob" else doc.get("spec", {})
        if "entrypoint" in job:
            found += [(f"{name} entrypoint", argv) for argv in simple_commands(job["entrypoint"])]
    for service_name, service in yaml.safe_load(COMPOSE.read_text())["services"].items():
        for item in compose_scripts(service):
            argvs = simple_commands(item) if isinstance(item, str) else [item]
            found += [(f"compose {service_name}", argv) for argv in argvs]
    for key, script in autoscaler_scripts(yaml.safe_load(AUTOSCALER.read_text())):
        found += [(f"autoscaler {key}", argv) for argv in simple_commands(script)]
    return found


def every_script() -> list[tuple[str, str]]:
    """(where, text) of every shell line of the deployment files."""
    scripts = [(f"autoscaler {key}", script) for key, script in autoscaler_scripts(yaml.safe_load(AUTOSCALER.read_text()))]
    for service_name, service in yaml.safe_load(COMPOSE.read_text())["services"].items():
        scripts += [(f"compose {service_name}", item) for item in compose_scripts(service) if isinstance(item, str)]
    for name, doc in k8s_documents():
        job = doc["spec"]["jobTemplate"] if doc["kind"] == "RayCronJob" else doc.get("spec", {})
        if "entrypoint" in job:
            scripts.append((f"{name} entrypoint", job["entrypoint"]))
    return scripts


def check_argv(argv: list[str]) -> str:
    """Parse argv with its program's own parser; what checked it (or why nothing could)."""
    program = os.path.basename(argv[0])
    if program == "agent-memory":
        import click

        from cli.main import cli

        command = cli.commands.get(argv[1])
        assert command is not None, f"no `agent-memory {argv[1]}`"
        try:
            command.make_context(f"agent-memory {argv[1]}", list(argv[2:]))
        except click.ClickException as exc:
            pytest.fail(f"agent-memory's parser refuses {shlex.join(argv)}: {exc.format_message()}")
        return "agent-memory's parser"
    if program == "ray":
        import click
        from ray.scripts.scripts import cli as ray_cli

        command = ray_cli.commands.get(argv[1])
        assert command is not None, f"no `ray {argv[1]}`"
        try:
            command.make_context(f"ray {argv[1]}", list(argv[2:]))
        except click.ClickException as exc:
            pytest.fail(f"Ray's CLI refuses {shlex.join(argv)}: {exc.format_message()}")
        return "Ray's CLI"
    assert program in NOT_PARSED, f"{shlex.join(argv)}: parse it, or say in NOT_PARSED why it cannot be"
    return f"not parsed: {NOT_PARSED[program]}"


@pytest.mark.parametrize(("where", "argv"), every_command(), ids=[f"{w}: {a[0]}" for w, a in every_command()])
def test_every_command_parses(where: str, argv: list[str]) -> None:
    check_argv(argv)


def test_the_commands_that_matter_are_found_and_parsed() -> None:
    checked = [(where, check_argv(argv)) for where, argv in every_command()]
    parsed_by = {where: by for where, by in checked if not by.startswith("not parsed")}
    assert {w for w in parsed_by if parsed_by[w] == "agent-memory's parser"} >= {
        "import-rayjob.yaml#0 entrypoint",
        "consolidation-raycronjob.yaml#0 entrypoint", "consolidation-rayjob.yaml#0 entrypoint",
        "compose ray-head", "autoscaler head_start_ray_commands",
    }
    ray_starts = [w for w, argv in every_command() if argv[:2] == ["ray", "start"]]
    assert {"compose ray-head", "compose ray-worker", "autoscaler head_start_ray_commands",
            "autoscaler worker_start_ray_commands"} <= set(ray_starts)


def test_the_command_splitter() -> None:
    assert simple_commands("A=1 nohup agent-memory serve --port 8000 > log 2>&1 < /dev/null & echo $! > pid") == [
        ["agent-memory", "serve", "--port", "8000"], ["echo", "$!"]]
    assert simple_commands("x || { y a && z; }") == [["x"], ["y", "a"], ["z"]]
    assert simple_commands("grep -q 'a > b' f || echo 'a' >> ~/.bashrc") == [["grep", "-q", "a > b", "f"], ["echo", "a"]]


@pytest.mark.parametrize(("where", "script"), every_script(), ids=[w for w, _ in every_script()])
def test_every_shell_line_is_valid_shell(where: str, script: str) -> None:
    checked = subprocess.run(["bash", "-n", "-c", script], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr


# --- the VM cluster (Ray's cluster launcher and autoscaler) -------------------------------------

def ray_cluster_schema() -> dict[str, Any]:
    import ray.autoscaler

    return json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())


def test_the_vm_cluster_validates_against_rays_schema() -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load(AUTOSCALER.read_text())
    jsonschema.validate(config, ray_cluster_schema())
    validate_config(prepare_config(copy.deepcopy(config)))  # what `ray up` does before it starts anything


@pytest.mark.parametrize("path", [[], ["available_node_types", "cpu-worker"], ["provider", "security_group"]])
def test_the_vm_cluster_schema_rejects_an_unknown_field(path: list[str]) -> None:
    config = yaml.safe_load(AUTOSCALER.read_text())
    node = config
    for step in path:
        node = node[step]
    node["min_worker"] = 1
    with pytest.raises(jsonschema.ValidationError, match="min_worker"):
        jsonschema.validate(config, ray_cluster_schema())


def test_the_vm_cluster_has_cpu_and_optional_gpu_workers_and_runs_the_app() -> None:
    config = yaml.safe_load(AUTOSCALER.read_text())
    assert config["provider"]["type"] == "aws"
    types = config["available_node_types"]
    assert types[config["head_node_type"]]["resources"] == {"CPU": 0}
    assert types["cpu-worker"]["min_workers"] >= 1
    gpu = types["gpu-worker"]
    assert gpu["min_workers"] == 0 and gpu["node_config"]["InstanceType"].startswith(("g", "p"))
    torch_pin = re.search(r"torch==[\w.]+", (ROOT / "Dockerfile").read_text())[0]  # type: ignore[index]
    setup = " ".join(config["setup_commands"])
    assert f"{torch_pin} --index-url https://download.pytorch.org/whl/cpu" in setup
    gpu_setup = " ".join(gpu["worker_setup_commands"])
    assert torch_pin in gpu_setup and "whl/cpu" not in gpu_setup  # a CUDA build on GPU nodes
    assert [c for c in config["setup_commands"] if "torch" not in c] == [
        c for c in gpu["worker_setup_commands"] if "torch" not in c]
    serve = [argv for _, script in autoscaler_scripts(config) for argv in simple_commands(script)
             if argv[:2] == ["agent-memory", "serve"]]
    assert serve == [["agent-memory", "serve", "--address", "auto", "--host", "0.0.0.0", "--port", "8000",
                      "--config", "~/agent-memory/cluster/serve_config.yaml"]]


def test_the_vm_cluster_hands_every_node_the_token_settings_and_keys() -> None:
    config = yaml.safe_load(AUTOSCALER.read_text())
    mounts = config["file_mounts"]
    assert mounts["~/.ray/auth_token"] == "~/.agent-memory/ray_auth_token"
    env = vm_env()
    keys_file = env["AGENT_MEMORY_API_KEYS_FILE"]
    assert keys_file == f"/home/{config['auth']['ssh_user']}/.agent-memory/api_keys.json"
    assert mounts["~/" + keys_file.split("/", 3)[3]] == "~/.agent-memory/api_keys.json"
    assert "~/.agent-memory/cluster.env" in mounts and config["file_mounts_sync_continuously"] is True
    starts = [script for key, script in autoscaler_scripts(config) if key.endswith("start_ray_commands")]
    for script in starts:
        for argv in simple_commands(script):
            if argv[:2] == ["ray", "start"]:
                assert "RAY_AUTH_MODE=token ray start" in script and ". ~/.agent-memory/cluster.env" in script
    assert any("export RAY_AUTH_MODE=token" in c for c in config["setup_commands"])


def vm_env() -> dict[str, str]:
    """vm.env.example as the nodes' shell reads it (`set -a; . file`)."""
    dumped = subprocess.run(
        ["bash", "-c", 'set -a; . "$1"; env -0', "_", str(VM_ENV)], capture_output=True, text=True, timeout=30,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    assert dumped.returncode == 0, dumped.stderr
    pairs = (item.split("=", 1) for item in dumped.stdout.split("\0") if "=" in item)
    return {k: v for k, v in pairs if k.startswith(("AGENT_MEMORY_", "AWS_"))}


def test_the_vm_settings_file_holds_real_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings = settings_from(vm_env(), monkeypatch, tmp_path)
    assert settings.value("storage_uri").startswith("s3://")
    assert settings.value("storage_options") == {"aws_region": "us-east-1"}


# --- docker-compose.yml -----------------------------------------------------------------------

INTERPOLATION = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}")
CREDENTIAL_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|ACCESS_KEY|_USER$")


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def env_example() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in ENV_EXAMPLE.read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}


def test_compose_parses_into_the_stack() -> None:
    services = compose()["services"]
    assert set(services) == {"minio", "minio-init", "ray-head", "ray-worker"}
    assert services["ray-worker"]["deploy"]["replicas"] >= 1 and "container_name" not in services["ray-worker"]


def test_every_compose_variable_is_in_env_example_and_no_other() -> None:
    text = COMPOSE.read_text()
    used = {m[1] for m in INTERPOLATION.finditer(text)}
    assert used == set(env_example())
    # Compose also reads a bare $NAME; every interpolation here is ${NAME}, and $$ a literal `$`.
    assert re.findall(r"(?<!\$)\$(?!\{|\$)[A-Za-z_]", text) == []


def test_credentials_are_required_from_the_environment_and_left_empty_in_the_example() -> None:
    text = COMPOSE.read_text()
    for match in INTERPOLATION.finditer(text):
        name, operator = match[1], match[2]
        if CREDENTIAL_NAME.search(name):
            assert operator == ":?", f"{name} must be required (${{{name}:?...}}), never defaulted"
    for name, value in env_example().items():
        if CREDENTIAL_NAME.search(name):
            assert value == "", f".env.example must leave {name} empty"


def test_every_service_healthy_dependency_has_a_health_check() -> None:
    services = compose()["services"]
    conditions = []
    for name, service in services.items():
        for target, spec in (service.get("depends_on") or {}).items():
            conditions.append(spec["condition"])
            assert target in services, f"{name} depends on a missing service {target}"
            if spec["condition"] == "service_healthy":
                assert (services[target].get("healthcheck") or {}).get("test"), f"{target} has no health check"
            if spec["condition"] == "service_completed_successfully":
                assert "restart" not in services[target], f"{target} runs once; it must not restart"
    assert conditions.count("service_healthy") >= 2


def test_health_checks_use_what_each_image_ships() -> None:
    services = compose()["services"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"apt-get install[^\n]* curl", dockerfile), "the app image's health check needs curl"
    assert services["ray-head"]["healthcheck"]["test"][:2] == ["CMD", "curl"]
    assert services["ray-head"]["healthcheck"]["test"][-1] == "http://localhost:8000/readyz"
    # MinIO's images no longer ship curl; they ship `mc` (not checkable here: no Docker).
    assert services["minio"]["healthcheck"]["test"] == ["CMD", "mc", "ready", "local"]


def test_images_are_pinned() -> None:
    for name, service in compose()["services"].items():
        image = service["image"]
        repository, _, tag = image.rpartition(":")
        assert repository and tag and tag != "latest" and "/" not in tag, f"{name}: {image}"
        if service.get("build"):
            assert image == APP_IMAGE, name


def test_ray_nodes_get_the_token_settings_and_keys_file() -> None:
    services = compose()["services"]
    for name in ("ray-head", "ray-worker"):
        service = services[name]
        env = service["environment"]
        assert env["RAY_AUTH_MODE"] == "token"
        assert env["RAY_AUTH_TOKEN"].startswith("${RAY_AUTH_TOKEN:?")
        keys_dir = os.path.dirname(env["AGENT_MEMORY_API_KEYS_FILE"])
        mounts = [v.split(":") for v in service["volumes"]]
        # ${API_KEYS_DIR:?...} holds a colon of its own: the target and mode are the last two fields.
        assert any(m[-2] == keys_dir and m[-1] == "ro" and m[0].startswith("${API_KEYS_DIR") for m in mounts), name
        assert service["init"] is True  # signals reach `agent-memory serve`, Ray's processes are reaped


def test_only_the_api_may_be_published_beyond_this_machine() -> None:
    for name, service in compose()["services"].items():
        for port in service.get("ports", []):
            if port.endswith(":8000:8000"):
                assert port.startswith("${API_BIND_ADDRESS:-127.0.0.1}"), port
            else:
                assert port.startswith("127.0.0.1:"), f"{name}: {port}"


def test_the_ray_nodes_environment_holds_real_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env = {k: INTERPOLATION.sub(lambda m: "x" * 12, str(v)) for k, v in compose()["services"]["ray-head"]["environment"].items()}
    settings = settings_from(env, monkeypatch, tmp_path)
    assert settings.value("storage_uri") == "s3://xxxxxxxxxxxx/lancedb"
    assert settings.value("storage_options")["aws_endpoint"] == "http://minio:9000"
    assert str(settings.value("api_keys_file")) == "/etc/agent-memory/keys/api_keys.json"


def test_minio_init_makes_the_bucket_and_the_apps_account_once(tmp_path: Path) -> None:
    service = compose()["services"]["minio-init"]
    script = compose_scripts(service)[0]
    assert isinstance(script, str)
    log = tmp_path / "mc.log"
    fake = tmp_path / "bin" / "mc"
    fake.parent.mkdir()
    # A stand-in for mc that logs its arguments; `admin user info` succeeds only when told so.
    fake.write_text('#!/bin/sh\necho "$*" >> "$MC_LOG"\n'
                    'if [ "$1 $2 $3" = "admin user info" ]; then [ -n "$USER_EXISTS" ]; fi\n')
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:/usr/bin:/bin", "MC_LOG": str(log), "MINIO_ROOT_USER": "root",
           "MINIO_ROOT_PASSWORD": "rootpass", "S3_BUCKET": "bkt", "S3_APP_ACCESS_KEY": "app", "S3_APP_SECRET_KEY": "apppass"}
    for exists, expected in [("", ["alias set store http://minio:9000 root rootpass", "mb --ignore-existing store/bkt",
                                   "admin user info store app", "admin user add store app apppass",
                                   "admin policy attach store readwrite --user app"]),
                             ("1", ["alias set store http://minio:9000 root rootpass", "mb --ignore-existing store/bkt",
                                    "admin user info store app"])]:
        log.write_text("")
        ran = subprocess.run(["sh", "-c", script], env={**env, "USER_EXISTS": exists}, capture_output=True, text=True,
                             timeout=30)
        assert ran.returncode == 0, ran.stderr
        assert log.read_text().splitlines() == expected


def docker_compose() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30).returncode == 0:
        return [docker, "compose"]
    return None


def test_docker_compose_accepts_the_file_and_refuses_missing_credentials(tmp_path: Path) -> None:
    command = docker_compose()
    if command is None:
        pytest.skip("Docker Compose is not installed here: `docker compose config` not run")
    filled = tmp_path / "filled.env"
    filled.write_text("".join(f"{k}={v or 'x' * 16}\n" for k, v in env_example().items()))
    base = [*command, "--project-directory", str(ROOT), "-f", str(COMPOSE)]
    ok = subprocess.run([*base, "--env-file", str(filled), "config", "--quiet"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    empty = subprocess.run([*base, "--env-file", str(ENV_EXAMPLE), "config", "--quiet"], capture_output=True, text=True,
                           timeout=60)
    assert empty.returncode != 0 and "missing a value" in empty.stderr


# --- no credential written anywhere -----------------------------------------------------------

CREDENTIAL_PATTERNS = {
    "MinIO's default account": re.compile(r"minioadmin", re.I),
    "an AWS access key id": re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
    "an agent-memory API key": re.compile(r"\bam_[A-Za-z0-9_-]{20,}"),
    "a long hex secret": re.compile(r"\b[0-9a-fA-F]{32,}\b"),
    "a long base64 secret": re.compile(r"(?<![\w/+])[A-Za-z0-9+/]{40,}={0,2}(?![\w/+])"),
    "a private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
}
# `password: hunter2`, `SECRET_KEY=abc`: a credential-named key with a literal value (not ${...}, a
# mapping, a reference or empty). Comments are left out of this one.
CREDENTIAL_VALUE = re.compile(
    r"""(?i)(?<![/.~\w-])[\w-]*(password|passwd|secret|token|secret_key|access_key|api_key)["']?\s*[:=]\s*"""
    r"""(?![\s'"]*(\$\{|\{|\[|\.\.\.|$))""")


def credential_findings(text: str) -> list[str]:
    found = [f"{what}: {m[0]}" for what, pattern in CREDENTIAL_PATTERNS.items() for m in pattern.finditer(text)]
    for line in text.splitlines():
        bare = INTERPOLATION.sub("${}", line)  # `${X:?...}` is a reference, whatever it says
        if not line.lstrip().startswith("#") and CREDENTIAL_VALUE.search(bare):
            found.append(f"a credential value: {line.strip()}")
    return found


DEPLOY_FILES = [COMPOSE, ENV_EXAMPLE, AUTOSCALER, VM_ENV, *sorted(K8S.glob("*.yaml"))]


@pytest.mark.parametrize("path", DEPLOY_FILES, ids=[str(p.relative_to(ROOT)) for p in DEPLOY_FILES])
def test_no_credential_is_written(path: Path) -> None:
    assert credential_findings(path.read_text()) == []


def test_the_credential_scan_finds_credentials() -> None:
    samples = ["MINIO_ROOT_PASSWORD: minioadmin", "key: AKIAABCDEFGHIJKLMNOP", "am_" + "Ab1_" * 11,
               "RAY_AUTH_TOKEN=" + "0f" * 32, "aws_secret_access_key: wJalrXUtnFEMI",
               "export S3_SECRET_KEY='s3cr3t'", "-----BEGIN OPENSSH PRIVATE KEY-----"]
    for sample in samples:
        assert credential_findings(sample), sample
    for clean in ["RAY_AUTH_TOKEN: ${RAY_AUTH_TOKEN:?set it}", "MINIO_ROOT_PASSWORD=", "secret: {secretName: x}",
                  "# the token: made with openssl", "secretRef: {name: agent-memory-storage}"]:
        assert credential_findings(clean) == [], clean


# --- shared -----------------------------------------------------------------------------------

def settings_from(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    """Settings as a process with exactly these AGENT_MEMORY_* variables would read them (no .env)."""
    for name in list(os.environ):
        if name.startswith("AGENT_MEMORY_"):
            monkeypatch.delenv(name)
    names = set(Settings.names())
    for name, value in env.items():
        if name.startswith("AGENT_MEMORY_"):
            assert name.removeprefix("AGENT_MEMORY_").lower() in names, f"{name} is no setting (docs/settings.md)"
            monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    return Settings(_env_file=None)
