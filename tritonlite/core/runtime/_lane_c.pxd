# C types for _lane_py.py when Cython compiles it as tritonlite.core.runtime._lane_c.
# Cython looks this file up by the compiled module's name, so it is named after _lane_c;
# the Python source stays the single definition of behaviour.
# cython: language_level=3

cimport cython

cdef object _now
cdef Py_ssize_t _SHAPES_MAX

@cython.final
cdef class DirectLane:
    cdef object model
    cdef object at_once
    cdef object sig
    cdef Py_ssize_t sig_id
    cdef object idle
    cdef object stats
    cdef object shm
    cdef str name
    cdef str version
    cdef long long inline_max_ns
    cdef dict framed
    cdef tuple all_outputs
    cdef tuple every
    cdef dict wire
    cdef object last_dtype
    cdef str last_wire
    cdef list names
    cdef dict index
    cdef dict shapes
    cdef public long long taken

    @cython.locals(recent="long long")
    cdef object _ready(self)

    @cython.locals(start="long long", feed=dict,
                   framed=dict, proven=dict, hit=tuple, shape_key=list, fits=bint, key=tuple,
                   size="long long", shape=object)
    cpdef object run(self, object req)

    @cython.locals(size="long long")
    cpdef object run_plain(self, tuple key, dict feed)

    @cython.locals(input_end="long long", infer_end="long long", end="long long",
                   k=Py_ssize_t, outs=list, index=dict, wire=dict, binary=bint, name=str,
                   names=list, values=list, kind=object, dt=str, named=object)
    cdef object _execute(self, object inst, dict feed, object pairs, long long batch_size,
                         long long start, bint objects)
