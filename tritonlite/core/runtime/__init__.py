"""Loaded models at run time: ``Model`` (the schedulers' instance pool), its instances and
their threads, health (failover, rebuilds, probes), warm-up, and the loaded ensemble.

The core's sub-packages import downward only (``tools/check_layers.py``): ``models`` and
``request`` -> ``runtime`` -> ``tensors`` -> ``observability``.
"""
