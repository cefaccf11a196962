"""Test double of ``triton_python_backend_utils``, the module Triton's python backend gives a model.py
(triton-inference-server/python_backend, src/resources/triton_python_backend_utils.py, and the C++
types it wraps: ``Tensor``, ``InferenceRequest``, ``InferenceResponse``, ``TritonError``), only as much
as trtlade's lookahead guard uses: ``get_input_tensor_by_name`` (None for an optional input the
request does not carry), ``Tensor(name, ndarray)`` with ``name()`` and ``as_numpy()``,
``InferenceResponse(output_tensors=..., error=...)`` with ``output_tensors()``, ``has_error()``,
``error()``, and ``TritonError(message)`` with ``message()``.

Test-only: ``InferenceRequest(inputs)`` builds a request from ``{name: ndarray}``.
"""

from __future__ import annotations

from typing import Optional

import numpy as np


class TritonError:
    def __init__(self, message: str) -> None:
        self._message = message

    def message(self) -> str:
        return self._message


class Tensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        if not isinstance(array, np.ndarray):
            raise TypeError("Tensor expects a numpy array")
        self._name = name
        self._array = array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class InferenceRequest:
    def __init__(self, inputs: dict[str, np.ndarray]) -> None:
        self._inputs = [Tensor(name, value) for name, value in inputs.items()]

    def inputs(self) -> list[Tensor]:
        return list(self._inputs)


class InferenceResponse:
    def __init__(self, output_tensors: list[Tensor], error: Optional[TritonError] = None) -> None:
        self._outputs = list(output_tensors)
        self._error = error

    def output_tensors(self) -> list[Tensor]:
        return list(self._outputs)

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> Optional[TritonError]:
        return self._error


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Optional[Tensor]:
    return next((t for t in request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Optional[Tensor]:
    return next((t for t in response.output_tensors() if t.name() == name), None)
