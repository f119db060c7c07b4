# C types for _policy_py.py when Cython compiles it as tritonlite.core.runtime._policy_c.
# Cython looks this file up by the compiled module's name, so it is named after _policy_c;
# the Python source stays the single definition of behaviour.
# cython: language_level=3

cimport cython

cdef long long INLINE_MAX_NS
cdef long long WAITED_INLINE_MAX_NS
cdef long long PROBE_FIRST
cdef long long PROBE_MAX

@cython.final
cdef class InlinePolicy:
    cdef public long long recent_ns
    cdef public long long max_ns
    cdef public long long _probe_every
    cdef public long long _since_probe
    cdef public bint _probing

    @cython.locals(recent="long long")
    cpdef bint inline(self)

    @cython.locals(recent="long long")
    cpdef void record(self, long long span)
