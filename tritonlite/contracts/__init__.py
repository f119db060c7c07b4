"""The bottom of the package: what every layer above shares and nothing above it is imported.

Request and response types (``types``), tensor datatypes (``datatypes``), the coded error
(``errors``), a batch's timestamps (``timing``), a model's tensor signature (``signature``) and
model configuration parsing, completion and validation (``config``, ``config_validate``,
``config_json``; Triton keeps ``model_config`` in ``common`` too). Only the leaf libraries
(``kernels``, ``memory``, ``gpu``) sit below it.
"""
