"""The Python backend: model.py files run in this process (``backend``) or, for a model with
an ``EXECUTION_ENV_PATH``, in a worker under that environment's interpreter (``env``,
``env_process``, ``env_worker``); ``pb_utils`` is what model code imports as
``triton_python_backend_utils``."""
