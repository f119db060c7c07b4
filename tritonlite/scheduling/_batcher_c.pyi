# The compiled twin has exactly the Python twin's API; its types come from there.
from tritonlite.scheduling._batcher_py import ACCEPTED as ACCEPTED
from tritonlite.scheduling._batcher_py import COMPILED as COMPILED
from tritonlite.scheduling._batcher_py import REJECT_QUEUE_FULL as REJECT_QUEUE_FULL
from tritonlite.scheduling._batcher_py import TIMEOUT_DELAY as TIMEOUT_DELAY
from tritonlite.scheduling._batcher_py import TIMEOUT_REJECT as TIMEOUT_REJECT
from tritonlite.scheduling._batcher_py import BatchQueue as BatchQueue
