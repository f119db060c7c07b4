"""Schedulers: they own queued requests and hand lists of them to model instances.

``batcher`` holds the batching decision (``BatchQueue``) and is the only module that knows it
has a compiled twin; the glue around it (dynamic, sequence, ensemble) imports it from there.
"""
