"""The request path around the scheduler: the response cache and decoupled response streams.

The core's sub-packages import downward only (``tools/check_layers.py``): ``models`` and
``request`` -> ``runtime`` -> ``tensors`` -> ``observability``.
"""
