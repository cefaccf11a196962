"""The serving contract both engines implement, and what they share to keep it.

:mod:`~trtlade.contract.protocol`: what a request is and what a generation reports
(``GenerationRequest``, ``StepChunk``, ``GenerationStats``); :mod:`~trtlade.contract.serving`: what the
HTTP layer needs from an engine (``ServingEngine``, ``EngineInfo``, ``GenerationHandle``) and what
it may raise; :mod:`~trtlade.contract.text`: one stop/EOS/detokenization rule set
(``OutputText``); :mod:`~trtlade.contract.tokenization`: prompts and chat templates. No torch and no
HTTP here: the server imports this, the engines implement it.
"""
