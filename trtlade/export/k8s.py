"""``trtlade export k8s``: plain Kubernetes manifests that serve a bundle (or a config) with
``trtlade serve``, scaled by replicas of the same engine.

Written (one file each): ``configmap.yml`` (the trtlade config, rewritten for the pod's paths),
``deployment.yml``, ``service.yml``, and with ``--hpa-max-replicas`` ``hpa.yml``. The Deployment:

- mounts the bundle read-only from a PersistentVolumeClaim at ``/bundle`` (a config that reads nothing from it,
  the embedded default's, gets no claim) and the config at ``/etc/trtlade``; an engine's pod reads the tokenizer
  (``--tokenizer``) and not ``model.path``;
- runs an init container ``trtlade validate-config /etc/trtlade/trtlade.yml --engine-dir
  /bundle/engine``: a pod whose engine does not match the config never starts serving;
- runs ``trtlade serve --config /etc/trtlade/trtlade.yml`` (under ``mpirun -n tp*pp`` when the
  engine spans several GPUs), asking ``nvidia.com/gpu: tp*pp``;
- has readiness and liveness probes on ``/health`` and Prometheus scrape annotations for ``/metrics``;
- gives the pod ``serve.shutdown_grace_s`` + 40 s to stop before Kubernetes kills it
  (``terminationGracePeriodSeconds``): the grace, the 503s of what it stopped, the engine's close;
- with a GPU, mounts a memory-backed ``/dev/shm`` (``--shm-size``, default 16Gi): TensorRT-LLM's own containers run
  with ``--ipc host`` (its installation guide, docs/source/installation), where a container runtime's 64 MiB
  ``/dev/shm`` fails NCCL and the MPI workers of a multi-GPU engine;
- requests the CPU and memory given (``--cpu``, ``--memory``): without them the pod is BestEffort, evicted first.

A PyTorch-backend bundle (TensorRT-LLM 1.0 on; the only kind from 1.3 on) runs ``trtllm-serve`` instead, with
the bundle's ``trtllm-serve.yml`` (:func:`pytorch_manifests`).

The HorizontalPodAutoscaler scales on ``trtlade_requests_queued`` per pod (a Pods metric: it needs
a metrics adapter, e.g. prometheus-adapter, exposing it). Every manifest is checked against the
Kubernetes schemas in the tests (``kubernetes-validate``).
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import yaml

from trtlade import __version__
from trtlade.bundle import CONFIG_FILE, ENGINE_DIR, TRTLLM_SERVE_FILE
from trtlade.config.schema import STOP_MARGIN_S, ServeSection
from trtlade.export.common import ExportError

__all__ = ["K8sOptions", "manifests", "pytorch_manifests", "pod_config_text", "config_data"]

BUNDLE_MOUNT = "/bundle"
MODEL_MOUNT = "/model"
CONFIG_MOUNT = "/etc/trtlade"
PORT = 8000


@dataclass(frozen=True)
class K8sOptions:
    """What the user chooses: names, image (default ``trtlade:<version>``), the claim holding the
    bundle, replicas, autoscaling."""

    name: str
    image: Optional[str] = None
    pvc: str = "trtlade-bundles"
    bundle_subpath: str = ""
    tokenizer: Optional[str] = None
    replicas: int = 1
    hpa_max_replicas: Optional[int] = None
    queue_target: int = 4
    shm_size: str = "16Gi"
    cpu: Optional[str] = None
    memory: Optional[str] = None
    #: a Secret whose ``api-key`` entry becomes the serving container's API-key variable (None: no key)
    api_key_secret: Optional[str] = None

    def __post_init__(self) -> None:
        if self.image is None:
            object.__setattr__(self, "image", f"trtlade:{__version__}")
        check_k8s_values(name=self.name, image=self.image, pvc=self.pvc, bundle_subpath=self.bundle_subpath,
                         tokenizer=self.tokenizer)
        if self.api_key_secret is not None and not (_DNS1123_SUBDOMAIN.fullmatch(self.api_key_secret)
                                                    and len(self.api_key_secret) <= 253):
            raise ExportError(f"{self.api_key_secret!r} is not a Secret name: lower-case letters, digits, '-' and "
                              "'.', starting and ending with a letter or digit", "e.g. --api-key-secret trtlade-key",
                              where="--api-key-secret")
        check_quantities(shm_size=self.shm_size, cpu=self.cpu, memory=self.memory)


#: A Service's name: an RFC 1035 label (Kubernetes' IsDNS1035Label): the Deployment and ConfigMap reuse it.
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
#: A PersistentVolumeClaim's name: an RFC 1123 subdomain (IsDNS1123Subdomain).
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


#: A resource quantity (k8s.io/apimachinery/pkg/api/resource, quantity.go's ParseQuantity): a decimal number, then
#: a binary (Ki .. Ei) or decimal (m, k, M .. E) suffix or an exponent; no sign here (a negative size means nothing).
_QUANTITY = re.compile(r"(?:[0-9]+(?:[.][0-9]*)?|[.][0-9]+)(?:[KMGTPE]i|[mkMGTPE]|[eE][+-]?[0-9]+)?")
#: What each quantity flag is for, with an example
_QUANTITY_FLAGS = {"shm_size": ("--shm-size", "16Gi", "0 keeps the runtime's own /dev/shm"),
                   "cpu": ("--cpu", "4", "cores (500m is half a core)"),
                   "memory": ("--memory", "32Gi", "bytes: Ki, Mi, Gi are powers of 1024")}


def check_quantities(**values: Optional[str]) -> None:
    """Refuse a resource quantity the API server would refuse (ExportError naming the flag).

    >>> check_quantities(shm_size="16Gi", cpu="500m", memory="1.5Gi")
    >>> check_quantities(memory="32GB")
    Traceback (most recent call last):
    ...
    trtlade.export.common.ExportError: --memory: '32GB' is not a Kubernetes quantity: ...
    """
    for field, value in values.items():
        if value is None:
            continue
        flag, example, unit = _QUANTITY_FLAGS[field]
        if not _QUANTITY.fullmatch(value.strip()) or value != value.strip():
            raise ExportError(f"{value!r} is not a Kubernetes quantity: a number, then a suffix such as Mi, Gi or m "
                              f"({unit})", f"e.g. {flag} {example}", where=flag)


def check_k8s_values(*, name: str, image: str, pvc: str, bundle_subpath: str = "", tokenizer: Optional[str] = None,
                     model_subpath: Optional[str] = None) -> None:
    """What the API server would refuse at ``kubectl apply``, refused at export (ExportError), with the rule:
    names as Kubernetes' validation (k8s.io/apimachinery/pkg/util/validation) reads them, a subPath relative and
    without ``..`` (the API server's validateLocalDescendingPath), an image reference without spaces.

    >>> check_k8s_values(name="qwen3-8b", image="trtlade:0.1", pvc="bundles")
    >>> check_k8s_values(name="My_App!", image="trtlade:0.1", pvc="bundles")
    Traceback (most recent call last):
    ...
    trtlade.export.common.ExportError: --name: 'My_App!' is not a Kubernetes Service name: ...
    """
    if not (_DNS1035_LABEL.fullmatch(name) and len(name) <= 63 - len("-config")):
        raise ExportError(f"{name!r} is not a Kubernetes Service name: lower-case letters, digits and '-', starting "
                          f"with a letter and ending with a letter or digit, at most {63 - len('-config')} "
                          "characters (the ConfigMap adds '-config')", "e.g. --name qwen3-8b", where="--name")
    if not image.strip() or any(c.isspace() for c in image):
        raise ExportError(f"{image!r} is not an image reference (empty, or with spaces)",
                          "e.g. --image registry.example.com/trtlade:0.1", where="--image")
    if not (_DNS1123_SUBDOMAIN.fullmatch(pvc) and len(pvc) <= 253):
        raise ExportError(f"{pvc!r} is not a PersistentVolumeClaim name: lower-case letters, digits, '-' and '.', "
                          "starting and ending with a letter or digit", "e.g. --pvc trtlade-bundles", where="--pvc")
    for flag, path in (("--bundle-subpath", bundle_subpath), ("--model-subpath", model_subpath)):
        if path and (path.startswith("/") or ".." in path.split("/")):
            raise ExportError(f"{flag} {path!r}: a subPath is a path inside the claim, relative and without '..' "
                              "(the API server refuses it)", f"e.g. {flag} models/qwen3", where=flag)
    if tokenizer is not None and not tokenizer.strip():
        raise ExportError("--tokenizer is empty", "give the tokenizer folder as the pod sees it, or leave the flag "
                          "out (default: the config's model.tokenizer / model.path)", where="--tokenizer")


def _pod_config(config: dict[str, Any], opts: K8sOptions, has_engine: bool) -> dict[str, Any]:
    """The trtlade config as the pod sees it: engine and tokenizer under the mounts, serving on 0.0.0.0."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
    serve = out.setdefault("serve", {})
    serve["host"], serve["port"] = "0.0.0.0", PORT
    if has_engine:
        out.setdefault("build", {})["engine_dir"] = f"{BUNDLE_MOUNT}/{ENGINE_DIR}"
        serve["engine"] = "trtllm"
    model = out.setdefault("model", {})
    if opts.tokenizer:
        model["tokenizer"] = opts.tokenizer
    if has_engine and model.get("tokenizer"):
        model.pop("path", None)  # the engine holds the weights: serve reads the tokenizer alone
    if opts.api_key_secret is not None and "metrics_without_key" not in serve:
        serve["metrics_without_key"] = True  # Prometheus and the autoscaler scrape /metrics without the key
    return out


def manifests(config: dict[str, Any], *, world_size: int, has_engine: bool, opts: K8sOptions) -> dict[str, str]:
    """The manifest files (name -> YAML text) for a config (as data) and its engine's world size."""
    serve = ["trtlade", "serve", "--config", f"{CONFIG_MOUNT}/{CONFIG_FILE}"]
    if world_size > 1:
        serve = ["mpirun", "-n", str(world_size), "--allow-run-as-root", *serve]
    check = ["trtlade", "validate-config", f"{CONFIG_MOUNT}/{CONFIG_FILE}"]
    if has_engine:
        check += ["--engine-dir", f"{BUNDLE_MOUNT}/{ENGINE_DIR}"]
    pod = _pod_config(config, opts, has_engine)
    data = {CONFIG_FILE: yaml.safe_dump(pod, sort_keys=False)}
    return _files(opts, serve=serve, check=check, data=data, gpus=world_size if has_engine else 0, scrape=True,
                  env=_key_env(config, opts), stop_s=_stop_within(config), claim=has_engine or _reads_claim(pod))


def _reads_claim(pod: Any) -> bool:
    """Whether the pod's config names anything on the claim, at any depth (a config of the embedded default names
    nothing: no claim, or a pod without one would never be scheduled).

    >>> _reads_claim({"model": {}}), _reads_claim({"model": {"name": "smollm2", "models_dir": "/bundle/models"}})
    (False, True)
    """
    if isinstance(pod, dict):
        return any(_reads_claim(v) for v in pod.values())
    if isinstance(pod, list):
        return any(_reads_claim(v) for v in pod)
    return isinstance(pod, str) and (pod == BUNDLE_MOUNT or pod.startswith(f"{BUNDLE_MOUNT}/"))


def _stop_within(config: dict[str, Any]) -> int:
    """Kubernetes' ``terminationGracePeriodSeconds`` for ``trtlade serve``: its ``serve.shutdown_grace_s`` and what
    it takes beyond that to answer the requests the grace stopped and close the engine, whole seconds; a shorter
    period would SIGKILL the server while requests are still finishing in their grace.

    >>> _stop_within({}), _stop_within({"serve": {"shutdown_grace_s": 300.5}})
    (70, 341)
    """
    serve = config.get("serve") if isinstance(config.get("serve"), dict) else {}
    grace = serve.get("shutdown_grace_s", ServeSection.model_fields["shutdown_grace_s"].default)
    return math.ceil(float(grace) + STOP_MARGIN_S)


#: the entry of the ``--api-key-secret`` Secret that holds the key
SECRET_KEY = "api-key"


def _key_env(config: dict[str, Any], opts: K8sOptions) -> list[dict[str, Any]]:
    """The serving container's API key from ``opts.api_key_secret``, under the variable the config's
    ``serve.api_key_env`` names (default TRTLADE_API_KEY); none without a Secret. A config whose
    ``api_key_env`` is null reads no variable: ExportError."""
    if opts.api_key_secret is None:
        return []
    serve = config.get("serve") if isinstance(config.get("serve"), dict) else {}
    variable = serve.get("api_key_env", "TRTLADE_API_KEY")
    if not variable:
        raise ExportError("--api-key-secret: the config's serve.api_key_env is null, so serve reads no key from the "
                          "environment", "set serve.api_key_env (default TRTLADE_API_KEY), or drop --api-key-secret",
                          where="--api-key-secret")
    if not re.fullmatch(r"[-._a-zA-Z][-._a-zA-Z0-9]*", str(variable)):  # apimachinery's IsEnvVarName
        raise ExportError(f"serve.api_key_env {variable!r} is not a name Kubernetes accepts for an environment "
                          "variable (letters, digits, '_', '-', '.', not starting with a digit)",
                          "rename it, e.g. TRTLADE_API_KEY", where="serve.api_key_env")
    return [{"name": variable, "valueFrom": {"secretKeyRef": {"name": opts.api_key_secret, "key": SECRET_KEY}}}]


def pytorch_manifests(serve_config_text: str, *, model_subpath: str, world_size: int,
                      opts: K8sOptions, release: str) -> dict[str, str]:
    """The manifests serving a PyTorch-backend bundle with ``trtllm-serve`` (TensorRT-LLM's own server): the
    bundle's trtllm-serve.yml in the ConfigMap, the checkpoint mounted from the claim's ``model_subpath`` at
    ``/model``, ``trtlade validate-config --upstream require`` on that file as the init gate (trtlade's verdict
    and the image's TensorRT-LLM's own ``TorchLlmArgs``, compared), probes on ``/health``. trtllm-serve's
    ``/metrics`` is JSON iteration statistics (``docs/source/commands/trtllm-serve.rst``), not Prometheus text:
    no scrape annotations, no autoscaler."""
    from trtlade.trtllm.releases import serve_config_flag

    serve = ["trtllm-serve", MODEL_MOUNT, serve_config_flag(release), f"{CONFIG_MOUNT}/{TRTLLM_SERVE_FILE}", "--host",
             "0.0.0.0", "--port", str(PORT)]
    if opts.tokenizer:
        serve += ["--tokenizer", opts.tokenizer]
    check = ["trtlade", "validate-config", f"{CONFIG_MOUNT}/{TRTLLM_SERVE_FILE}", "--upstream", "require"]
    model_mount = {"name": "bundle", "mountPath": MODEL_MOUNT, "readOnly": True, "subPath": model_subpath}
    return _files(opts, serve=serve, check=check, data={TRTLLM_SERVE_FILE: serve_config_text}, gpus=world_size,
                  scrape=False, extra_mounts=[model_mount], gate_gpus=True)


def _files(opts: K8sOptions, *, serve: list[str], check: list[str], data: dict[str, str], gpus: int, scrape: bool,
           extra_mounts: Optional[list[dict[str, Any]]] = None, env: Optional[list[dict[str, Any]]] = None,
           gate_gpus: bool = False, stop_s: int = 60, claim: bool = True) -> dict[str, str]:
    """Deployment, Service, ConfigMap (and HPA) around one serving container and its init gate. ``gate_gpus``: the
    gate imports TensorRT-LLM (``--upstream require``), whose import may need the GPU driver that a container gets
    only with a GPU: it asks for the server's GPUs too (an init container runs before the server, and the kubelet
    hands its devices on to it, ``devicesToReuse`` in kubernetes' ``pkg/kubelet/cm/devicemanager/manager.go``; a
    pod's request is the larger of its init containers' and its containers' sum: it asks for no more GPUs). ``stop_s``:
    the pod's ``terminationGracePeriodSeconds``; ``claim``: whether the pod mounts the claim at /bundle."""
    labels = {"app.kubernetes.io/name": "trtlade", "app.kubernetes.io/instance": opts.name}
    cm_name = f"{opts.name}-config"
    mounts = [{"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True},
              *([{"name": "bundle", "mountPath": BUNDLE_MOUNT, "readOnly": True,
                  **({"subPath": opts.bundle_subpath} if opts.bundle_subpath else {})}] if claim else []),
              *(extra_mounts or [])]
    serve_mounts, volumes = _volumes(opts, cm_name, mounts, gpus)
    scraping = {"prometheus.io/scrape": "true", "prometheus.io/path": "/metrics", "prometheus.io/port": str(PORT)}
    container = _serving_container(opts, serve, serve_mounts, env, _resources(opts, gpus))
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": opts.name, "labels": labels},
        "spec": {
            # with an HPA the autoscaler owns the count: a replicas field would reset it at every `kubectl apply`
            **({} if opts.hpa_max_replicas else {"replicas": opts.replicas}), "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, **({"annotations": scraping} if scrape else {})},
                "spec": {
                    "initContainers": [{"name": "validate-config", "image": opts.image, "command": check,
                                        "volumeMounts": mounts,
                                        **({"resources": {"limits": {"nvidia.com/gpu": gpus}}}
                                           if gate_gpus and gpus else {})}],
                    "containers": [container],
                    "terminationGracePeriodSeconds": stop_s,
                    "volumes": volumes,
                },
            },
        },
    }
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": opts.name, "labels": labels, **({"annotations": scraping} if scrape else {})},
               "spec": {"selector": labels, "ports": [{"name": "http", "port": PORT, "targetPort": "http"}]}}
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm_name, "labels": labels},
                 "data": data}
    files = {"configmap.yml": configmap, "deployment.yml": deployment, "service.yml": service}
    if opts.hpa_max_replicas:
        files["hpa.yml"] = _autoscaler(opts, labels)
    header = (f"# written by `trtlade export k8s` (trtlade {__version__}); serve command: {shlex.join(serve)}\n")
    return {name: header + yaml.dump(doc, Dumper=_PlainDumper, sort_keys=False) for name, doc in files.items()}


def _serving_container(opts: K8sOptions, serve: list[str], mounts: list[dict[str, Any]],
                       env: Optional[list[dict[str, Any]]], resources: dict[str, Any]) -> dict[str, Any]:
    """The serving container: its command, port, mounts, environment, /health probes and resources."""
    probe = {"httpGet": {"path": "/health", "port": "http"}}
    return {
        "name": "trtlade", "image": opts.image, "command": serve,
        "ports": [{"name": "http", "containerPort": PORT}], "volumeMounts": mounts,
        **({"env": env} if env else {}),
        "readinessProbe": {**probe, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**probe, "periodSeconds": 20, "failureThreshold": 3},
        "startupProbe": {**probe, "periodSeconds": 10, "failureThreshold": 90},  # up to 15 min to load
        **({"resources": resources} if resources else {}),
    }


def _autoscaler(opts: K8sOptions, labels: dict[str, str]) -> dict[str, Any]:
    """A HorizontalPodAutoscaler on the queued requests per pod, from --replicas up to --hpa-max-replicas."""
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": opts.name, "labels": labels},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": opts.name},
                 "minReplicas": opts.replicas, "maxReplicas": opts.hpa_max_replicas,
                 "metrics": [{"type": "Pods", "pods": {
                     "metric": {"name": "trtlade_requests_queued"},
                     "target": {"type": "AverageValue", "averageValue": str(opts.queue_target)}}}]}}


def _volumes(opts: K8sOptions, cm_name: str, mounts: list[dict[str, Any]],
             gpus: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The serving container's mounts and the pod's volumes: the config, the claim, and with a GPU a
    memory-backed /dev/shm of ``opts.shm_size`` (none for 0)."""
    volumes = [{"name": "config", "configMap": {"name": cm_name}},
               *([{"name": "bundle", "persistentVolumeClaim": {"claimName": opts.pvc, "readOnly": True}}]
                 if any(m["name"] == "bundle" for m in mounts) else [])]
    if not (gpus and _nonzero(opts.shm_size)):
        return list(mounts), volumes
    shm = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": opts.shm_size}}
    return [*mounts, {"name": "dshm", "mountPath": "/dev/shm"}], [*volumes, shm]


def _nonzero(quantity: str) -> bool:
    """``0``, ``0Gi``, ``0.0`` ... are nothing: no volume."""
    return any(c in "123456789" for c in re.split(r"[eE]", quantity)[0])


def _resources(opts: K8sOptions, gpus: int) -> dict[str, Any]:
    """The container's requests (CPU and memory, where given) and limits (the GPUs: Kubernetes schedules
    extended resources by their limit)."""
    requests = {k: v for k, v in (("cpu", opts.cpu), ("memory", opts.memory)) if v is not None}
    out: dict[str, Any] = {"requests": requests} if requests else {}
    if gpus:
        out["limits"] = {"nvidia.com/gpu": gpus}
    return out


class _PlainDumper(yaml.SafeDumper):
    """No anchors and aliases: every manifest reads as written (shared dicts are repeated)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _block_strings(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    """Multi-line strings (the ConfigMap's config) as literal blocks, readable as the file they hold."""
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_PlainDumper.add_representer(str, _block_strings)


def pod_config_text(files: dict[str, str]) -> str:
    """The trtlade config the ConfigMap of ``files`` holds (as the pod reads it)."""
    return yaml.safe_load(files["configmap.yml"])["data"][CONFIG_FILE]


def config_data(path: Path) -> dict[str, Any]:
    """A trtlade config file as plain data (validated by the caller)."""
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
