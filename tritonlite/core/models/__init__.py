"""The model repository and each model's lifecycle: scanning repositories, loading and
unloading versions (with ensembles' composing models), version states, model names.

The core's sub-packages import downward only (``tools/check_layers.py``): ``models`` and
``request`` -> ``runtime`` -> ``tensors`` -> ``observability``.
"""
