"""The OpenAI-compatible API, translated to core calls and back (no HTTP in here).

``errors`` (OpenAI's error shape), ``body`` (request JSON -> checked parameters), ``contract``
(which models can answer, read from their config once per loaded config), ``template`` (chat
messages -> ``text_input``), ``translate`` (parameters -> ``InferRequest``, responses -> OpenAI
objects and stream chunks). ``frontends/http/openai.py`` calls these from its route handlers.
"""
