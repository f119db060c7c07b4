"""``tritonlite tune``: find a model's best serving config by measuring candidates on a server.

Modules: ``space`` (candidates, the stages, pruning), ``server`` (the server tune starts or is
pointed at, repository and statistics calls), ``load`` (the built-in async load generator),
``perfa`` (perf_analyzer as the load), ``runner`` (the search), ``report`` (config.pbtxt,
report.md, CSV, plots), ``cli`` (flags and the run).
"""
