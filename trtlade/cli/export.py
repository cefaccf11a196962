"""``trtlade export``: write a bundle's settings for the stacks users already run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import typer

from trtlade.cli.common import EXIT_USAGE, err_console, fail

#: --force of the exports that write a folder
FORCE_HELP = "Replace an --out folder an earlier export wrote (nothing else: not a bundle, nor a folder of yours)."

export_app = typer.Typer(
    name="export",
    help="Write a bundle's settings for the stacks users run (grps_trtllm, Triton, Kubernetes), from the one bundle.",
    no_args_is_help=True,
    add_completion=False,
)


@export_app.command("grps")
def grps(
    bundle: Path = typer.Argument(..., help="A TensorRT-LLM bundle made by `trtlade build`."),
    out: Path = typer.Option(..., "--out", "-o", help="The inference yml to write (e.g. conf/inference.yml)."),
    tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", help="The tokenizer folder as grps will see it "
                                             "(default: the bundle config's model.tokenizer or model.path)."),
    bundle_path: Optional[Path] = typer.Option(None, "--bundle-path", help="Where the bundle is on the grps "
                                               "machine (default: its absolute path here)."),
    llm_style: Optional[str] = typer.Option(None, "--llm-style", help="grps_trtllm's llm_style (default: derived "
                                            "from the model's model_type and chat template; refused if none fits)."),
    model_dir: Optional[Path] = typer.Option(None, "--model-dir", help="The model's Hugging Face folder on this "
                                             "machine, read for llm_style, end/pad ids, special tokens, stop words "
                                             "and sampling (default: the bundle config's model.tokenizer or "
                                             "model.path, when it is here)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --out."),
) -> None:
    """A grps_trtllm inference yml with the bundle's engine and (W,N,G), and every key grps_trtllm's loader
    reads with no fallback (llm_style, tokenizer_type, ...). grps takes no per-request lookahead: every
    request runs with the bundle's spec. `trtlade validate-config` passes on it. A PyTorch-backend bundle
    (TensorRT-LLM 1.3 and later) is refused: grps_trtllm runs TensorRT engines only."""
    from trtlade.export.common import CONTAINER_NOTE, write_file
    from trtlade.export.grps import grps_inference_yml, grps_warnings
    from trtlade.export.llmapi import grps_refusal, is_pytorch_bundle

    if is_pytorch_bundle(bundle):
        exc = grps_refusal(bundle)
        fail(exc.message, where=exc.where, hint=exc.hint)

    src = _export(bundle, bundle_path, tokenizer,
                  lambda s: write_file(out, grps_inference_yml(s, llm_style=llm_style), force=force),
                  model_dir=model_dir)
    for warning in grps_warnings(src):
        err_console.print(f"warning: {warning}", markup=False, highlight=False)
    ranks = src.engine.world_size
    mpi = (f"; the engine has {ranks} GPU ranks: start grps over MPI (`grpst start ... --mpi_np {ranks}`)"
           if ranks > 1 else "")
    err_console.print(f"wrote {out}: grps_trtllm inference config, engine {src.engine_dir}, lookahead "
                      f"({src.config.lookahead.spec}); check it with: trtlade validate-config {out} "
                      f"--engine-dir {src.bundle.engine_dir}{mpi}; {CONTAINER_NOTE}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")


def _require_source(path: Path, what: str = "bundle folder") -> None:
    """The export's source must exist: a missing argument is a usage mistake (exit 2), as on every command."""
    if not path.exists():
        fail(f"{path}: no such {what}", code=EXIT_USAGE,
             hint="give the folder `trtlade build` wrote" + (" or a trtlade config file" if "config" in what else ""))


def _absolute_on_the_server(**paths: Optional[Path]) -> None:
    """``--tokenizer`` and ``--bundle-path`` name folders on the serving machine: an empty one read as ``.``, and a
    relative one is resolved from the server's working directory, which the export cannot know: refused."""
    for name, path in paths.items():
        flag = "--" + name.replace("_", "-")
        if path is not None and not path.is_absolute():
            fail(f"{flag} {str(path)!r} is not an absolute path: the server would resolve it from its own working "
                 "directory", where=flag, hint=f"give the folder as the serving machine sees it, e.g. {flag} /models/x")


def _export(bundle: Path, bundle_path: Optional[Path], tokenizer: Optional[Path], write: Callable[[Any], None],
            model_dir: Optional[Path] = None) -> Any:
    """Read ``bundle`` as a TensorRT-LLM export source and ``write(src)``; any refusal exits with its
    reason and hint. Returns the source (for the success line)."""
    from trtlade.export.common import ExportError, read_source

    _require_source(bundle)
    _absolute_on_the_server(tokenizer=tokenizer, bundle_path=bundle_path)
    if model_dir is not None and not (model_dir / "config.json").is_file():
        fail(f"--model-dir {model_dir} has no config.json", where="--model-dir",
             hint="the model's Hugging Face folder on this machine (config.json, tokenizer files)")
    try:
        src = read_source(bundle, root=bundle_path, tokenizer=tokenizer, model_dir_here=model_dir)
        write(src)
    except ExportError as exc:
        fail(exc.message, where=exc.where, hint=exc.hint)
    return src


@export_app.command("triton")
def triton(
    bundle: Path = typer.Argument(..., help="A TensorRT-LLM bundle made by `trtlade build` (TensorRT-LLM >= 0.19)."),
    out: Path = typer.Option(..., "--out", "-o", help="The model repository folder to write."),
    tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", help="The tokenizer folder as Triton will see it "
                                             "(default: the bundle config's model.tokenizer or model.path)."),
    bundle_path: Optional[Path] = typer.Option(None, "--bundle-path", help="Where the bundle is on the Triton "
                                               "machine (default: its absolute path here)."),
    model_path: Optional[str] = typer.Option(None, "--model-path", help="PyTorch-backend bundles: the checkpoint "
                                             "folder as Triton will see it (default: the bundle config's "
                                             "model.path)."),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Triton's inflight_batcher_llm model repository (preprocessing, lookahead_guard, tensorrt_llm,
    postprocessing, ensemble) with the bundle's engine and (W,N,G); each config.pbtxt checked as Triton's
    ModelConfig. lookahead_guard refuses a request's oversize (w,n,g) for that request alone (TensorRT-LLM
    would fail every request in flight on it), row by row for a batched request, and gives a request that
    names none lookahead.request_default (else the bundle's spec). A lookahead.schedule or policy other than
    fixed cannot apply in Triton: the export warns. A PyTorch-backend bundle (TensorRT-LLM 1.0 on, the only
    kind from 1.3) becomes Triton's llmapi model: config.pbtxt and a model.yaml with the bundle's
    speculative_config, checked as the stock model.py loads it."""
    from trtlade.export.common import CONTAINER_NOTE, write_tree
    from trtlade.export.llmapi import is_pytorch_bundle
    from trtlade.export.triton import model_repository

    if is_pytorch_bundle(bundle):
        _triton_llmapi(bundle, out, tokenizer, bundle_path, model_path, force)
        return
    if model_path is not None:
        fail("--model-path applies to PyTorch-backend bundles only; this bundle holds an engine", where="--model-path",
             hint="the engine's tokenizer is set with --tokenizer")

    src = _export(bundle, bundle_path, tokenizer, lambda s: write_tree(out, model_repository(s), force=force))
    from trtlade.export.triton import engine_version, launch_script, warnings
    from trtlade.export.triton_stock import family, model_py_source

    for warning in warnings(src):
        err_console.print(f"warning: {warning}", markup=False, highlight=False)
    source = model_py_source(family(engine_version(src.engine.version)))
    ranks = src.engine.world_size
    start = (f"python3 {launch_script(engine_version(src.engine.version))} --world_size {ranks} --model_repo {out} "
             f"(one Triton "
             f"process per GPU rank, over MPI: the engine has {ranks} ranks)" if ranks > 1
             else f"tritonserver --model-repository {out}")
    requests = ("a request sets lookahead_window_size, lookahead_ngram_size and lookahead_verification_set_size "
                "together or none of them (lookahead_guard refuses a partial or oversize triple for that request alone)"
                if not src.config.lookahead.spec.is_autoregressive else
                "requests carry no lookahead inputs (the engine decodes without lookahead)")
    guard = " (lookahead_guard's is written)" if not src.config.lookahead.spec.is_autoregressive else ""
    err_console.print(f"wrote the model repository {out} (lookahead {src.config.lookahead.spec}); copy the python "
                      f"models' model.py from {source}{guard}, then: {start}; {requests}; {CONTAINER_NOTE}",
                      markup=False, highlight=False)


def _triton_llmapi(bundle: Path, out: Path, tokenizer: Optional[Path], bundle_path: Optional[Path],
                   model_path: Optional[str], force: bool) -> None:
    from trtlade.export.common import CONTAINER_NOTE, ExportError, serve_not_carried, write_tree
    from trtlade.export.llmapi import llmapi_repository, model_py_source, read_pytorch_source

    _require_source(bundle)
    _absolute_on_the_server(tokenizer=tokenizer)
    if bundle_path is not None:
        fail("--bundle-path does not apply to a PyTorch-backend bundle: Triton loads the checkpoint, not the bundle",
             where="--bundle-path", hint="give the checkpoint as Triton sees it with --model-path")
    try:
        src = read_pytorch_source(bundle, model_path=model_path, tokenizer=str(tokenizer) if tokenizer else None)
        write_tree(out, llmapi_repository(src), force=force)
    except ExportError as exc:
        fail(exc.message, where=exc.where, hint=exc.hint)
    for warning in serve_not_carried(src.config, "Triton"):
        err_console.print(f"warning: {warning}", markup=False, highlight=False)
    drafter = (src.options.get("speculative_config") or {}).get("decoding_type", "none")
    err_console.print(f"wrote Triton's llmapi model {out}/tensorrt_llm (TensorRT-LLM {src.release}, speculative_config "
                      f"{drafter}, checkpoint {src.model_path}); copy model.py and helpers.py from "
                      f"{model_py_source(src.release)} into {out}/tensorrt_llm/1/, then on the Triton machine: "
                      f"trtlade validate-config {out}/tensorrt_llm/1/model.yaml && tritonserver --model-repository "
                      f"{out}. Requests cannot choose their own drafter (the server's speculative_config applies). "
                      f"{CONTAINER_NOTE[0].upper()}{CONTAINER_NOTE[1:]}.", markup=False, highlight=False)


@export_app.command("k8s")
def k8s(
    source: Path = typer.Argument(..., help="A TensorRT-LLM bundle made by `trtlade build`, or a trtlade config "
                                  "file (the reference engine: no GPU)."),
    out: Path = typer.Option(..., "--out", "-o", help="The folder to write the manifests into."),
    name: str = typer.Option("trtlade", "--name", help="Name of the Deployment, Service and ConfigMap."),
    image: Optional[str] = typer.Option(None, "--image", help="Container image with trtlade (and TensorRT-LLM for "
                                        "a bundle). Default: trtlade:<version>."),
    pvc: str = typer.Option("trtlade-bundles", "--pvc", help="PersistentVolumeClaim holding the bundle."),
    bundle_subpath: str = typer.Option("", "--bundle-subpath", help="The bundle's folder inside the claim."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="The tokenizer folder as the pod sees it, "
                                            "under /bundle (default: the config's model.tokenizer / model.path; a "
                                            "bundle `trtlade build` made names the build machine's folder: pass it)."),
    replicas: int = typer.Option(1, "--replicas", min=1, help="Replicas of the same engine."),
    hpa_max_replicas: Optional[int] = typer.Option(None, "--hpa-max-replicas", min=1, help="Also write a "
                                                   "HorizontalPodAutoscaler on queue depth, up to this many."),
    queue_target: Optional[int] = typer.Option(None, "--queue-target", min=1, help="Queued requests per pod the HPA "
                                               "aims at (with --hpa-max-replicas; default 4)."),
    model_subpath: Optional[str] = typer.Option(None, "--model-subpath", help="PyTorch-backend bundles: the "
                                                "checkpoint's folder inside the claim, mounted at /model (default: "
                                                "the name of the bundle config's model.path)."),
    shm_size: Optional[str] = typer.Option(None, "--shm-size", help="GPU pods: the memory-backed /dev/shm (a "
                                           "Kubernetes quantity; it counts against the pod's memory; default 16Gi). "
                                           "0 keeps the runtime's 64 MiB."),
    cpu: Optional[str] = typer.Option(None, "--cpu", help="CPU the serving container requests, e.g. 4 or 500m "
                                      "(default: none, a BestEffort pod)."),
    memory: Optional[str] = typer.Option(None, "--memory", help="Memory the serving container requests, e.g. 32Gi "
                                         "(default: none)."),
    api_key_secret: Optional[str] = typer.Option(None, "--api-key-secret", help="A Secret whose `api-key` entry is "
                                                 "the API key clients must send (into the config's serve.api_key_env "
                                                 "variable). Default: none, the pod serves without a key."),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Kubernetes manifests serving the bundle with `trtlade serve`: Deployment (init container running
    validate-config against the mounted engine, /health probes, nvidia.com/gpu = tp*pp, mpirun when
    tp*pp > 1, a memory-backed /dev/shm on GPU pods, CPU and memory requests where given, Prometheus scrape
    of /metrics), Service, ConfigMap with the config, optional HPA. A
    PyTorch-backend bundle (TensorRT-LLM 1.3 and later) runs `trtllm-serve --config` with the bundle's
    trtllm-serve.yml, validate-config on that file as the init gate."""
    from trtlade.config.loader import parse_yaml, validate_trtlade
    from trtlade.export.common import ExportError, write_tree
    from trtlade.export.k8s import K8sOptions, check_k8s_values, manifests, pod_config_text

    _require_source(source, "bundle folder or config file")
    _check_autoscaler(replicas, hpa_max_replicas, queue_target)
    try:
        opts = K8sOptions(name, image, pvc, bundle_subpath, tokenizer, replicas, hpa_max_replicas,
                          4 if queue_target is None else queue_target,
                          shm_size="16Gi" if shm_size is None else shm_size, cpu=cpu, memory=memory,
                          api_key_secret=api_key_secret)
        check_k8s_values(name=name, image=opts.image or "", pvc=pvc, model_subpath=model_subpath)
    except ExportError as exc:
        fail(exc.message, where=exc.where, hint=exc.hint)
    from trtlade.export.llmapi import is_pytorch_bundle

    if is_pytorch_bundle(source):
        _k8s_pytorch(source, out, opts, model_subpath, force)
        return
    if model_subpath is not None:
        fail("--model-subpath applies to PyTorch-backend bundles only", where="--model-subpath",
             hint="an engine bundle is mounted whole from --bundle-subpath")
    try:
        config, world, has_engine = _k8s_source(source, tokenizer, shm_given=shm_size is not None)
        files = manifests(config, world_size=world, has_engine=has_engine, opts=opts)
        _refuse_model_outside_the_pod(pod_config_text(files), tokenizer)
        _refuse_unused_claim(files, pvc, bundle_subpath)
        checked, errors = validate_trtlade(parse_yaml(pod_config_text(files), "configmap.yml:trtlade.yml"))
        if checked is None:
            raise ExportError("the pod's config would not be valid: " + "; ".join(d.message for d in errors[:3]),
                              "fix the source config", where=str(source))
        write_tree(out, files, force=force)
    except ExportError as exc:
        fail(exc.message, where=exc.where, hint=exc.hint)
    for note in _pod_serve_notes(config, pod_config_text(files)) + _pod_model_notes(config, pod_config_text(files)) \
            + _pod_key_notes(config, opts):
        err_console.print(f"note: {note}", markup=False, highlight=False)
    err_console.print(f"wrote {', '.join(sorted(files))} into {out}; apply with: kubectl apply -f {out}",
                      markup=False, highlight=False)


def _check_autoscaler(replicas: int, hpa_max_replicas: Optional[int], queue_target: Optional[int]) -> None:
    """The autoscaler's flags agree: an aim only with an autoscaler, its maximum at least the replicas."""
    if queue_target is not None and hpa_max_replicas is None:
        fail("--queue-target sets the autoscaler's aim, and there is no autoscaler without --hpa-max-replicas",
             where="--queue-target", hint="add --hpa-max-replicas N, or drop --queue-target")
    if hpa_max_replicas is not None and hpa_max_replicas < replicas:
        fail(f"--hpa-max-replicas {hpa_max_replicas} is below --replicas {replicas}", where="--hpa-max-replicas",
             hint="the autoscaler's maximum must be at least the starting replicas")


def _k8s_source(source: Path, tokenizer: Optional[str], *, shm_given: bool) -> tuple[dict[str, Any], int, bool]:
    """An engine bundle's or a reference-engine config's (trtlade.yml data, world size, has an engine); raises
    :class:`~trtlade.export.common.ExportError` for anything else, and fails (exit) where --shm-size is given for
    a config file (its pod has no GPU)."""
    from trtlade.bundle import is_bundle
    from trtlade.config.loader import ConfigError, ConfigLoadError, load_config
    from trtlade.export.common import ExportError, read_source
    from trtlade.export.k8s import config_data

    if source.is_dir() or is_bundle(source):
        src = read_source(source, tokenizer=Path(tokenizer) if tokenizer else None)
        return config_data(src.bundle.config_file), src.engine.world_size, True
    if not source.is_file():
        raise ExportError("no such bundle or config", "give a bundle folder or a trtlade config file",
                          where=str(source))
    try:
        loaded = load_config(source)
    except (ConfigError, ConfigLoadError) as exc:
        raise ExportError(f"not a valid trtlade config:\n{exc}",
                          f"check it with `trtlade validate-config {source}`", where=str(source)) from None
    if loaded.config.serve.engine != "reference":
        raise ExportError("a config file exports the reference engine (no GPU); this one serves TensorRT-LLM "
                          "(serve.engine trtllm), whose engine or checkpoint is a folder on this machine",
                          "export the bundle `trtlade build` made instead (its folder goes on the claim), or "
                          "set serve.engine: reference", where=str(source))
    if shm_given:
        fail("--shm-size sizes a GPU pod's /dev/shm, and a config file's pod (the reference engine) has no "
             "GPU", where="--shm-size", hint="drop --shm-size (it applies to bundles of GPU engines)")
    return config_data(source), 1, False


def _refuse_unused_claim(files: dict[str, str], pvc: str, bundle_subpath: str) -> None:
    """``--pvc`` / ``--bundle-subpath`` for a pod that mounts no claim (its config names nothing on one: the embedded
    default model) would be dropped without a word: refused."""
    from trtlade.export.common import ExportError

    given = [flag for flag, value in (("--pvc", pvc != "trtlade-bundles"), ("--bundle-subpath", bool(bundle_subpath)))
             if value]
    if given and "persistentVolumeClaim" not in files["deployment.yml"]:
        raise ExportError(f"{given[0]}: the pod mounts no claim (its config names nothing on one: the embedded model "
                          "is in the image), so it would not be used", "drop it, or point the config's model at "
                          "/bundle/<folder> on the claim", where=given[0])


def _under_the_claim(path: str) -> bool:
    """Whether ``path`` is the claim's mount or a folder under it, as the pod sees it (``/bundle``, ``/bundle/x/``)."""
    from pathlib import PurePosixPath

    from trtlade.export.k8s import BUNDLE_MOUNT

    mount = PurePosixPath(BUNDLE_MOUNT)
    return PurePosixPath(path) == mount or mount in PurePosixPath(path).parents


def _refuse_model_outside_the_pod(pod_text: str, tokenizer: Optional[str]) -> None:
    """The pod sees the claim at /bundle and the config at /etc/trtlade, nothing of this machine: the folder `serve`
    reads the tokenizer from (``model.tokenizer``, else ``model.path``), the reference engine's weights
    (``model.path``, or ``model.name`` under ``model.models_dir``) must be under /bundle, or the init gate passes and
    `trtlade serve` fails at start. No model named: the embedded default, in the image."""
    import yaml

    from trtlade.export.common import ExportError
    from trtlade.export.k8s import BUNDLE_MOUNT

    pod = yaml.safe_load(pod_text) or {}
    model, engine = pod.get("model") or {}, bool((pod.get("build") or {}).get("engine_dir"))
    if model.get("name") and not model.get("path") and not engine:
        where = model.get("models_dir")
        if not where or not _under_the_claim(str(where)):
            raise ExportError(f"model.name {model['name']} is looked up under "
                              f"{where or '$TRTLADE_MODELS_DIR, which the pod does not set'}, not under "
                              f"{BUNDLE_MOUNT}, the only folder of the claim the pod sees: serve would not find it",
                              f"put the models folder on the claim and set model.models_dir: {BUNDLE_MOUNT}/<its "
                              "folder> in the config", where="model.models_dir")
    for name in ("tokenizer", "path"):  # every folder serve reads in the pod (an engine's pod reads no model.path)
        folder = model.get(name)
        if folder and not _under_the_claim(str(folder)):
            key = "--tokenizer" if name == "tokenizer" and tokenizer else f"model.{name}"
            # the reference engine reads its weights from model.path: moving the tokenizer would not do
            tok = name == "tokenizer" or (engine and not model.get("tokenizer"))
            what = "the tokenizer" if tok else "the model"
            raise ExportError(f"{key} {folder} is not under {BUNDLE_MOUNT}, the only folder of the claim the pod "
                              f"sees: serve would not find {what} there", f"put the model's Hugging Face folder on "
                              f"the claim and pass --tokenizer {BUNDLE_MOUNT}/<its folder> (the bundle is mounted "
                              "whole from --bundle-subpath)" if what == "the tokenizer" else
                              f"put the model's folder on the claim and point model.path at {BUNDLE_MOUNT}/<its "
                              "folder> in the config", where="--tokenizer" if key == "--tokenizer" else key)


def _pod_serve_notes(source: dict, pod_text: str) -> list[str]:
    """The serve settings the pod runs with where they differ from the source's (said, never silently)."""
    import yaml

    given = source.get("serve") if isinstance(source.get("serve"), dict) else {}
    pod = (yaml.safe_load(pod_text) or {}).get("serve") or {}
    why = {"port": "the Service, the probes and the scrape annotation use it",
           "host": "the pod must listen beyond its loopback for the Service to reach it"}
    return [f"serve.{key} {given[key]} is {pod.get(key)} in the pod ({why[key]})"
            for key in ("port", "host") if key in given and given[key] != pod.get(key)]



def _pod_model_notes(source: dict, pod_text: str) -> list[str]:
    """A model.path the pod does not read (an engine's pod reads its tokenizer alone), said."""
    import yaml

    given = source.get("model") if isinstance(source.get("model"), dict) else {}
    pod = (yaml.safe_load(pod_text) or {}).get("model") or {}
    if given.get("path") and "path" not in pod:
        return [f"model.path {given['path']} is left out of the pod: the engine holds the weights, and serve reads the "
                f"tokenizer from {pod.get('tokenizer')}"]
    return []


def _pod_key_notes(source: dict, opts: Any) -> list[str]:
    """Who may call the pod, said: without --api-key-secret it serves on 0.0.0.0 without a key; a keys file of the
    config is not in the pod (the ConfigMap holds the config alone)."""
    from trtlade.export.k8s import SECRET_KEY

    serve = source.get("serve") if isinstance(source.get("serve"), dict) else {}
    notes = []
    variable = serve.get("api_key_env", "TRTLADE_API_KEY")
    if opts.api_key_secret is None:
        how = (f"--api-key-secret NAME puts a Secret's {SECRET_KEY!r} entry into ${variable}" if variable else
               "the config's serve.api_key_env is null: set it, then pass --api-key-secret NAME")
        notes.append(f"the pod serves without an API key: anyone who reaches the Service can use it ({how})")
    if opts.api_key_secret is not None:
        notes.append("serve.metrics_without_key is false: Prometheus and the autoscaler get 401 from /metrics "
                     "(scrape with the key, or set it true)" if serve.get("metrics_without_key") is False else
                     "/metrics is open without the key in the pod (serve.metrics_without_key: true), for the scrape "
                     "annotations and the autoscaler; every other route needs the key")
    if serve.get("api_keys_file"):
        notes.append(f"serve.api_keys_file {serve['api_keys_file']} is not in the pod (the ConfigMap holds the config "
                     "alone): mount the keys file (a Secret) and set serve.api_keys_file to its path in the pod, or "
                     "serve will refuse to start")
    return notes


def _k8s_pytorch(source: Path, out: Path, opts: Any, model_subpath: Optional[str], force: bool) -> None:
    from trtlade.export.common import ExportError, write_tree
    from trtlade.export.k8s import MODEL_MOUNT, pytorch_manifests
    from trtlade.export.llmapi import read_pytorch_source

    if opts.api_key_secret is not None:
        fail("--api-key-secret: trtllm-serve checks no API key (a PyTorch-backend bundle is served by it)",
             where="--api-key-secret", hint="put an authenticating gateway in front of the Service, or serve the "
             "bundle with `trtlade serve`")
    if opts.hpa_max_replicas is not None:
        fail("--hpa-max-replicas needs trtlade's Prometheus metric trtlade_requests_queued; trtllm-serve's /metrics "
             "is JSON iteration statistics", where="--hpa-max-replicas",
             hint="scale with --replicas, or serve the bundle with `trtlade serve` behind your own autoscaler")
    try:
        src = read_pytorch_source(source)
        subpath = model_subpath or Path(src.model_path).name
        files = pytorch_manifests(src.bundle.trtllm_serve_file.read_text(encoding="utf-8"), model_subpath=subpath,
                                  world_size=src.world_size, opts=opts, release=src.release)
        write_tree(out, files, force=force)
    except ExportError as exc:
        fail(exc.message, where=exc.where, hint=exc.hint)
    err_console.print(f"wrote {', '.join(sorted(files))} into {out}: trtllm-serve (TensorRT-LLM {src.release}) on "
                      f"the checkpoint at {MODEL_MOUNT} (the claim {opts.pvc}'s {subpath}); the image must carry that "
                      f"TensorRT-LLM and trtlade (the init container runs validate-config); apply with: kubectl "
                      f"apply -f {out}", markup=False, highlight=False)
    err_console.print("note: trtllm-serve checks no API key: anyone who reaches the Service can use it (put an "
                      "authenticating gateway in front)", markup=False, highlight=False)
