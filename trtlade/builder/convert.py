"""Step 1 of ``trtlade build``: convert a Hugging Face folder into a TensorRT-LLM checkpoint with
TensorRT-LLM's Python API (the ``examples/*/convert_checkpoint.py`` scripts are not in the wheel).

Run as its own process (``trtlade build`` logs its output to ``<bundle>/logs/convert.log``)::

    python -m trtlade.builder.convert --hf-dir /models/Qwen3-8B --checkpoint-dir /b/checkpoint \\
        --model-class QWenForCausalLM --dtype bfloat16 --tp-size 2 --pp-size 1

which does, for every rank r < tp*pp::

    mapping = tensorrt_llm.Mapping(world_size=tp*pp, rank=r, tp_size=tp, pp_size=pp)
    model = tensorrt_llm.models.QWenForCausalLM.from_hugging_face(hf_dir, dtype, mapping=mapping,
                                                                   quant_config=QuantConfig())
    model.save_checkpoint(checkpoint_dir, save_config=(r == 0))   # rank{r}.safetensors (+ config.json)

``--probe`` only imports TensorRT-LLM (checking 0.16 <= version < 1.3), finds the class, and runs the
class's config conversion (``config_class.from_hugging_face``), which reads config.json only: a stock
0.16 refuses Qwen3 there in a second ("Unsupported Qwen type: qwen3"), before any weights are read.

``--result FILE`` receives one JSON object: ``{"ok": true, "version": "0.16.0", ...}`` or
``{"ok": false, "kind": "unavailable" | "unsupported-qwen3" | "unsupported-architecture" | "error",
"message": ..., "hint": ..., "version": ...}``. Exit status 0 on success, 3 on a reported failure.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Sequence

from trtlade.builder.errors import BuildError
from trtlade.builder.models import check_architecture_version
from trtlade.errors import TrtladeError
from trtlade.trtllm.compat import TrtllmUnavailable, import_tensorrt_llm, qwen3_note, supports_qwen3

__all__ = ["main", "ConversionFailure", "EXIT_REPORTED"]

EXIT_REPORTED = 3


class ConversionFailure(TrtladeError):
    """A failure with a known meaning, reported in the result file."""

    def __init__(self, kind: str, message: str, hint: str = "") -> None:
        super().__init__(message, hint)
        self.kind = kind


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m trtlade.builder.convert",
                                description="Convert a Hugging Face folder to a TensorRT-LLM checkpoint.")
    p.add_argument("--probe", action="store_true",
                   help="only check TensorRT-LLM, the model class and the config conversion")
    p.add_argument("--hf-dir", required=True, type=Path)
    p.add_argument("--checkpoint-dir", type=Path)
    p.add_argument("--model-class", required=True, help="a tensorrt_llm.models class, e.g. QWenForCausalLM")
    p.add_argument("--architecture", help="the HF architectures[0]: refused when this TensorRT-LLM predates the "
                                          "first release that converts it")
    p.add_argument("--dtype", default="auto", choices=["auto", "float16", "bfloat16", "float32"])
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--pp-size", type=int, default=1)
    p.add_argument("--result", type=Path, help="write the outcome as JSON to this file")
    return p


def _model_class(trt: Any, name: str) -> Any:
    models = trt.models
    model_map = getattr(models, "MODEL_MAP", {}) or {}
    cls = getattr(models, name, None)
    if cls is None:
        cls = next((c for c in model_map.values() if getattr(c, "__name__", None) == name), None)
    if cls is None:
        raise ConversionFailure(
            "unsupported-architecture",
            f"TensorRT-LLM {trt.__version__} has no model class tensorrt_llm.models.{name}",
            hint="trtlade supports TensorRT-LLM 0.16 to 1.2; this class is in all of them, so the "
                 "install looks broken: reinstall it")
    return cls


def _no_quantization() -> Any:
    """``QuantConfig()`` (no quantization), as upstream's convert_checkpoint.py passes it: some converter
    paths read ``quant_config.quant_algo`` without a None check (tensorrt_llm/models/qwen/model.py,
    QWenForCausalLM.from_hugging_face: Qwen 1 with tp > 1 and TRTLLM_DISABLE_UNIFIED_CONVERTER)."""
    return import_tensorrt_llm("models.modeling_utils").QuantConfig()


def _mapping(trt: Any, tp: int, pp: int, rank: int) -> Any:
    return trt.Mapping(world_size=tp * pp, rank=rank, tp_size=tp, pp_size=pp)


def _known(exc: BaseException, version: str) -> ConversionFailure | None:
    """Known conversion errors, as a kind + hint."""
    text = f"{type(exc).__name__}: {exc}"
    if "Unsupported Qwen type" in text and "qwen3" in text:
        return ConversionFailure("unsupported-qwen3", f"TensorRT-LLM {version} cannot convert Qwen3: {exc}",
                                 hint=qwen3_note(version))
    if "does not recognize this architecture" in text or "model type `qwen3`" in text:
        hint = ("upgrade transformers to a release that knows the model within what your TensorRT-LLM "
                "accepts, or use a TensorRT-LLM release that ships one")
        if "qwen3" in text and not supports_qwen3(version):
            # a newer transformers only moves the failure on to "Unsupported Qwen type: qwen3"
            hint = ("a newer transformers alone does not help: this TensorRT-LLM has no Qwen3 engine support "
                    "either. " + qwen3_note(version))
        return ConversionFailure(
            "transformers-too-old", f"the transformers package next to TensorRT-LLM {version} does not "
            f"know this model: {exc}", hint=hint)
    return None


def probe(args: argparse.Namespace) -> dict[str, Any]:
    """Import TensorRT-LLM, find the class, run its config conversion (no weights read)."""
    trt = import_tensorrt_llm()
    version = str(trt.__version__)
    if args.architecture:
        try:
            check_architecture_version(args.architecture, version)
        except BuildError as exc:
            raise ConversionFailure("unsupported-architecture", exc.message, hint=exc.hint) from exc
    cls = _model_class(trt, args.model_class)
    config_class = getattr(cls, "config_class", None)
    checked = False
    if config_class is not None and hasattr(config_class, "from_hugging_face"):
        try:
            config_class.from_hugging_face(str(args.hf_dir), dtype=args.dtype,
                                           mapping=_mapping(trt, args.tp_size, args.pp_size, 0),
                                           quant_config=_no_quantization())
        except Exception as exc:  # noqa: BLE001 - reported as data
            known = _known(exc, version)
            if known is not None:
                raise known from exc
            raise
        checked = True
    return {"ok": True, "version": version, "model_class": cls.__name__, "config_checked": checked,
            "module": str(getattr(trt, "__file__", ""))}


def convert(args: argparse.Namespace) -> dict[str, Any]:
    """Probe, then convert rank by rank, printing one line per rank."""
    info = probe(args)
    trt = import_tensorrt_llm()
    cls = _model_class(trt, args.model_class)
    world = args.tp_size * args.pp_size
    out = args.checkpoint_dir
    out.mkdir(parents=True, exist_ok=True)
    ranks = []
    for rank in range(world):
        t0 = time.monotonic()
        mapping = _mapping(trt, args.tp_size, args.pp_size, rank)
        print(f"[trtlade] rank {rank}/{world}: {cls.__name__}.from_hugging_face({str(args.hf_dir)!r}, "
              f"{args.dtype!r}, mapping=Mapping(world_size={world}, rank={rank}, tp_size={args.tp_size}, "
              f"pp_size={args.pp_size}), quant_config=QuantConfig())", flush=True)
        try:
            model = cls.from_hugging_face(str(args.hf_dir), args.dtype, mapping=mapping,
                                          quant_config=_no_quantization())
            model.save_checkpoint(str(out), save_config=(rank == 0))
        except Exception as exc:  # noqa: BLE001
            known = _known(exc, info["version"])
            if known is not None:
                raise known from exc
            raise
        del model
        gc.collect()
        seconds = time.monotonic() - t0
        ranks.append({"rank": rank, "seconds": round(seconds, 3)})
        print(f"[trtlade] rank {rank}/{world}: saved to {out} in {seconds:.1f} s", flush=True)
    return {**info, "ranks": ranks}


def _write_result(path: Path | None, data: dict[str, Any]) -> None:
    if path is not None:
        path.write_text(json.dumps(data, indent=2) + "\n")


def _loaded_version() -> str | None:
    module = sys.modules.get("tensorrt_llm")
    version = getattr(module, "__version__", None)
    return str(version) if version is not None else None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.probe and args.checkpoint_dir is None:
        _parser().error("--checkpoint-dir is required unless --probe")
    if args.tp_size < 1 or args.pp_size < 1:
        _parser().error("--tp-size and --pp-size must be >= 1")
    try:
        result = probe(args) if args.probe else convert(args)
    except TrtllmUnavailable as exc:
        _write_result(args.result, {"ok": False, "kind": "unavailable", "message": exc.message,
                                    "hint": exc.hint, "version": exc.version})
        print(f"[trtlade] error: {exc}", file=sys.stderr)
        return EXIT_REPORTED
    except ConversionFailure as exc:
        version = _loaded_version()
        traceback.print_exc()
        _write_result(args.result, {"ok": False, "kind": exc.kind, "message": exc.message, "hint": exc.hint,
                                    "version": version})
        return EXIT_REPORTED
    except Exception as exc:  # noqa: BLE001 - the full traceback goes to the log
        version = _loaded_version()
        traceback.print_exc()
        _write_result(args.result, {"ok": False, "kind": "error", "message": f"{type(exc).__name__}: {exc}",
                                    "hint": "", "version": version})
        return EXIT_REPORTED
    _write_result(args.result, result)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
