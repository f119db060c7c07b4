# The compiled twin has exactly the Python twin's API; its types come from there.
from tritonlite.core.runtime._policy_py import INLINE_MAX_NS as INLINE_MAX_NS
from tritonlite.core.runtime._policy_py import PROBE_FIRST as PROBE_FIRST
from tritonlite.core.runtime._policy_py import PROBE_MAX as PROBE_MAX
from tritonlite.core.runtime._policy_py import WAITED_INLINE_MAX_NS as WAITED_INLINE_MAX_NS
from tritonlite.core.runtime._policy_py import InlinePolicy as InlinePolicy
