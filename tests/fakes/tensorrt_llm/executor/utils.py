"""Test double of ``tensorrt_llm.executor.utils``: ``RequestError``.

mirrors: tensorrt_llm/executor/utils.py, ``class RequestError(RuntimeError)``: what iterating or awaiting a
``GenerationResult`` raises when the executor answered the request with an error response
(tensorrt_llm/executor/result.py, ``GenerationResultBase._handle_response`` hands ``response.error_msg`` to the
executor's background error handler, which raises it as ``RequestError``).
"""


class RequestError(RuntimeError):
    """A request failed inside the executor; the text is the executor's error message."""
