"""Triton python model written by ``trtlade export triton``: the per-request lookahead guard.

Why it exists: Triton's TensorRT-LLM backend passes a request's ``lookahead_window_size``,
``lookahead_ngram_size`` and ``lookahead_verification_set_size`` to the executor without comparing them
with the model's (W,N,G) (tensorrtllm_backend, inflight_batcher_llm/src/utils.cc,
getLookaheadDecodingFromTensors). TensorRT-LLM checks them only inside the decoder step
(cpp/tensorrt_llm/layers/lookaheadAlgorithm.cpp, LookaheadAlgorithm::setup: "lookahead requires setup w
(%d) <= max_w (%d)"), and the executor answers that exception by failing EVERY request in flight
(cpp/tensorrt_llm/executor/executorImpl.cpp, Executor::Impl::forwardAsync -> terminateActiveRequests).
So one client could end every other client's request. This model sits in the ensemble between the
client and ``tensorrt_llm`` and refuses such a request alone, with an error that names the row, the
field, the value and the allowed range.

A Triton request may carry a batch of B rows (a client's batch, perf_analyzer ``-b``): every input is
``[B, 1]`` here, and every output must be ``[B, 1]`` too, because Triton refuses to feed ``tensorrt_llm``
inputs whose batch sizes disagree (triton-inference-server/core, src/infer_request.cc,
InferenceRequest::Normalize: "input '...' batch size does not match other inputs"); the backend then
splits the batch into B executor requests, each with its own row of every input
(tensorrtllm_backend, inflight_batcher_llm/src/utils.cc, splitBatchInputsTensors).

Per row it outputs the triple ``tensorrt_llm`` gets: the client's (all three, each legal and within the
model's), or the config's ``lookahead.request_default`` (else the model's own (W,N,G)) when the client
sent none. A request with one bad row is refused whole (Triton answers a request, not a row), and the
message names the row. The model's (W,N,G) come from this model's config.pbtxt parameters
``max_window_size``, ``max_ngram_size``, ``max_verification_set_size``; the default triple from
``default_window_size``, ``default_ngram_size``, ``default_verification_set_size`` (absent: the model's).

Nothing here runs outside Triton's python backend; trtlade copies this file as ``1/model.py``.
"""

import json

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # read as text by trtlade, imported only by Triton (or by tests with a stand-in)
    pb_utils = None

KEYS = ("lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size")
OUTPUTS = ("OUT_WINDOW_SIZE", "OUT_NGRAM_SIZE", "OUT_VERIFICATION_SET_SIZE")
LIMITS = ("max_window_size", "max_ngram_size", "max_verification_set_size")
DEFAULTS = ("default_window_size", "default_ngram_size", "default_verification_set_size")
#: A required input of the guard: its first dimension is the request's batch size.
BATCH_INPUT = "REQUEST_INPUT_LEN"


def legality_error(w, n, g):
    """TensorRT-LLM's LookaheadDecodingConfig constructor rules (cpp/tensorrt_llm/executor/decodingConfig.cpp),
    in its order; None when legal."""
    if n < 1:
        return "lookahead_ngram_size must be >= 1"
    if w < 1:
        return "lookahead_window_size must be >= 1"
    if n == 1 and g != 0:
        return "lookahead_ngram_size 1 requires lookahead_verification_set_size 0"
    if n == 1 and w != 1:
        return "lookahead_ngram_size 1 requires lookahead_window_size 1"
    if g < 0:
        return "lookahead_verification_set_size must be >= 0"
    return None


def check(given, limits, default=None):
    """The triple to send (a tuple of three ints), or an error message (a str), for one row.

    ``given``: the row's three values in KEYS order (None where not sent); ``limits``: the model's (W,N,G);
    ``default``: what a row that sent none gets (None: ``limits``).
    """
    if all(v is None for v in given):
        return tuple(default if default is not None else limits)
    if any(v is None for v in given):
        missing = ", ".join(k for k, v in zip(KEYS, given) if v is None)
        return ("send lookahead_window_size, lookahead_ngram_size and lookahead_verification_set_size together "
                f"or none of them; missing: {missing}")
    bad = legality_error(*given)
    if bad is not None:
        return f"illegal lookahead ({given[0]},{given[1]},{given[2]}): {bad}"
    for key, value, limit in zip(KEYS, given, limits):
        if value > limit:
            return (f"{key} {value} is above this model's {limit} (its W,N,G are {limits[0]},{limits[1]},"
                    f"{limits[2]}; allowed 1..{limit}): refused for this request alone, because TensorRT-LLM "
                    "checks it only inside the decoder step, where the failure ends every request in flight")
    return tuple(given)


def rows_of(tensor, key, batch):
    """A [B, 1] lookahead input as B ints; ValueError naming the input when its shape is not that."""
    values = tensor.as_numpy()
    if values.ndim == 0 or values.shape[0] != batch or values.size != batch:
        raise ValueError(f"{key} must hold one INT32 value per row of the request's batch ({batch} rows, shape "
                         f"[{batch}, 1]), got shape {list(values.shape)}")
    return [int(v) for v in values.reshape(-1)]


def triples(columns, batch, limits, default=None):
    """Each row's triple (a list of B tuples), or the first bad row's error message (a str).

    ``columns``: per key in KEYS order, the B sent values or None when the input is absent.

    >>> triples([None, None, None], 2, (4, 2, 4), default=(2, 2, 1))
    [(2, 2, 1), (2, 2, 1)]
    >>> triples([[4, 5], [2, 2], [4, 4]], 2, (4, 2, 4))[:52]
    'row 1 of 2: lookahead_window_size 5 is above this mo'
    """
    out = []
    for row in range(batch):
        outcome = check([None if col is None else col[row] for col in columns], limits, default)
        if isinstance(outcome, str):
            return f"row {row} of {batch}: {outcome}" if batch > 1 else outcome
        out.append(outcome)
    return out


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = config.get("parameters", {})
        self.limits = tuple(int(params[name]["string_value"]) for name in LIMITS)
        given = [params.get(name, {}).get("string_value") for name in DEFAULTS]
        self.default = tuple(int(v) for v in given) if all(given) else self.limits

    def execute(self, requests):
        return [self._one(request) for request in requests]

    def _one(self, request):
        batch = int(pb_utils.get_input_tensor_by_name(request, BATCH_INPUT).as_numpy().shape[0])
        try:
            columns = [None if t is None else rows_of(t, key, batch)
                       for key, t in ((k, pb_utils.get_input_tensor_by_name(request, k)) for k in KEYS)]
        except ValueError as exc:
            return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(exc)))
        outcome = triples(columns, batch, self.limits, self.default)
        if isinstance(outcome, str):
            return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(outcome))
        table = np.array(outcome, dtype=np.int32).reshape(batch, 3)
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor(name, np.ascontiguousarray(table[:, i:i + 1])) for i, name in enumerate(OUTPUTS)])

    def finalize(self):
        pass
