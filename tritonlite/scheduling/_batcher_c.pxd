# C types for _batcher_py.py when Cython compiles it as tritonlite.scheduling._batcher_c.
# Cython looks this file up by the compiled module's name, so it is named after _batcher_c;
# the Python source stays the single definition of behaviour.
# cython: language_level=3

cimport cython

cdef long long _NO_DEADLINE
cdef Py_ssize_t _COMPACT_MIN

@cython.final
cdef class _Entry:
    cdef long long slot
    cdef long long batch_size
    cdef long long enqueue_ns
    cdef long long deadline_ns
    cdef long long shape_key
    cdef Py_ssize_t level
    cdef bint alive

@cython.final
cdef class _Level:
    cdef list main
    cdef Py_ssize_t main_head
    cdef list delayed
    cdef Py_ssize_t delayed_head
    cdef Py_ssize_t size
    cdef int action
    cdef long long timeout_ns
    cdef bint allow_override
    cdef Py_ssize_t max_size

@cython.locals(n=Py_ssize_t)
cdef Py_ssize_t _compact(list entries, Py_ssize_t head)

@cython.final
cdef class BatchQueue:
    cdef readonly long long max_batch_size
    cdef readonly tuple preferred_batch_sizes
    cdef readonly long long max_queue_delay_ns
    cdef readonly long long priority_levels
    cdef long long _max_preferred
    cdef list _is_preferred
    cdef Py_ssize_t _default_index
    cdef list _levels
    cdef dict _by_slot
    cdef Py_ssize_t _size
    cdef long long _next_deadline
    cdef list _rejected
    cdef long long _scan_pending
    cdef Py_ssize_t _scan_count
    cdef long long _scan_best
    cdef Py_ssize_t _scan_best_count
    cdef long long _scan_oldest
    cdef long long _scan_closest
    cdef long long _scan_shape
    cdef bint _scan_send_now

    @cython.locals(index=Py_ssize_t, level=_Level, timeout=cython.longlong, entry=_Entry)
    cpdef int push(self, long long slot, long long batch_size, long long now_ns,
                   long long priority=*, long long timeout_ns=*, long long shape_key=*) except -1

    @cython.locals(level=_Level, delay=cython.longlong, waited=cython.longlong,
                   delay_exceeded=cython.bint, wait=cython.longlong)
    cpdef tuple next_batch(self, long long now_ns)

    @cython.locals(i=Py_ssize_t, entry=_Entry, size=cython.longlong)
    cdef bint _scan(self, list entries, Py_ssize_t start) except -1

    @cython.locals(out=list, remaining=Py_ssize_t, level=_Level, entries=list, i=Py_ssize_t,
                   entry=_Entry)
    cpdef list pop(self, Py_ssize_t n)

    cdef void _take(self, _Entry entry, _Level level, list out) except *

    @cython.locals(entry=_Entry, level=_Level)
    cpdef bint remove(self, long long slot) except -1

    @cython.locals(rejected=list)
    cpdef list expired(self, long long now_ns)

    cpdef long long next_deadline_ns(self)

    @cython.locals(earliest=cython.longlong, level=_Level, kept=list, entries=list,
                   i=Py_ssize_t, entry=_Entry)
    cdef void _apply_policy(self, long long now_ns) except *
