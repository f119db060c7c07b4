"""Tensors in and out of a model: request validation against the model's signature, response
building (classification included), shared-memory regions.

The core's sub-packages import downward only (``tools/check_layers.py``): ``models`` and
``request`` -> ``runtime`` -> ``tensors`` -> ``observability``.
"""
