"""Statistics, latency metrics, tracing, log settings, memory pressure and system information.

The core's sub-packages import downward only (``tools/check_layers.py``): ``models`` and
``request`` -> ``runtime`` -> ``tensors`` -> ``observability``.
"""
