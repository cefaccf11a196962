"""Triton python model written by ``trtlade export triton``: the per-request lookahead guard.

Why it exists: Triton's TensorRT-LLM backend passes a request's ``lookahead_window_size``,
``lookahead_ngram_size`` and ``lookahead_verification_set_size`` to the executor without comparing them
with the model's (W,N,G) (tensorrtllm_backend, inflight_batcher_llm/src/utils.cc,
getLookaheadDecodingFromTensors). TensorRT-LLM checks them only inside the decoder step
(cpp/tensorrt_llm/layers/lookaheadAlgorithm.cpp, LookaheadAlgorithm::setup: "lookahead requires setup w
(%d) <= max_w (%d)"), and the executor answers that exception by failing EVERY request in flight
(cpp/tensorrt_llm/executor/executorImpl.cpp, Executor::Impl::forwardAsync -> terminateActiveRequests).
So one client could end every other client's request. This model sits in the ensemble between the
client and ``tensorrt_llm`` and refuses such a request alone, with an error that names the field, the
value and the allowed range.

Per request it outputs the triple ``tensorrt_llm`` gets: the client's (all three, each legal and within
the model's), or the model's own (W,N,G) when the client sent none. The model's (W,N,G) come from this
model's config.pbtxt parameters ``max_window_size``, ``max_ngram_size``, ``max_verification_set_size``.

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


def check(given, limits):
    """The triple to send (a tuple of three ints), or an error message (a str).

    ``given``: the three request values in KEYS order (None where not sent); ``limits``: the model's (W,N,G).
    """
    if all(v is None for v in given):
        return tuple(limits)
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


def _scalar(tensor, key):
    values = tensor.as_numpy().reshape(-1)
    if values.size != 1:
        raise ValueError(f"{key} must hold one INT32 value, got {values.size}")
    return int(values[0])


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = config.get("parameters", {})
        self.limits = tuple(int(params[name]["string_value"]) for name in LIMITS)

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                given = [None if t is None else _scalar(t, key)
                         for key, t in ((k, pb_utils.get_input_tensor_by_name(request, k)) for k in KEYS)]
            except ValueError as exc:
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(exc))))
                continue
            outcome = check(given, self.limits)
            if isinstance(outcome, str):
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(outcome)))
                continue
            tensors = [pb_utils.Tensor(name, np.array([[value]], dtype=np.int32))
                       for name, value in zip(OUTPUTS, outcome)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses

    def finalize(self):
        pass
