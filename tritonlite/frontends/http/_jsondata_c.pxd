# C types for _jsondata_py.py when Cython compiles it as tritonlite.frontends.http._jsondata_c.
# Cython looks this file up by the compiled module's name, so it is named after _jsondata_c;
# the Python source stays the single definition of behaviour.
# cython: language_level=3

cimport cython

cdef int _MAX_DEPTH
cdef Py_ssize_t _FAST_MAX
cdef double _F32_MAX
cdef double _F16_MAX
cdef double _F64_MAX
cdef int _K_F32
cdef int _K_F64
cdef int _K_F16
cdef int _K_I32
cdef int _K_I64
cdef int _K_BOOL
cdef dict _KINDS

ctypedef fused reals:
    float[::1]
    double[::1]

ctypedef fused ints:
    int[::1]
    long long[::1]

@cython.locals(x=object, v=double)
cdef Py_ssize_t _reals(list data, reals buf, Py_ssize_t pos, Py_ssize_t n, int depth,
                       double limit) except -2

@cython.locals(x=object, v="long long")
cdef Py_ssize_t _ints(list data, ints buf, Py_ssize_t pos, Py_ssize_t n, int depth,
                      long long lo, long long hi) except -2

@cython.locals(x=object, v="unsigned char")
cdef Py_ssize_t _bools(list data, unsigned char[::1] buf, Py_ssize_t pos, Py_ssize_t n,
                       int depth) except -2

@cython.locals(x=object, total=Py_ssize_t, k=Py_ssize_t)
cdef Py_ssize_t _count(list data, Py_ssize_t n, int depth) except -2

@cython.locals(spec=tuple, n=Py_ssize_t, d=object, kind=int, lo="long long", hi="long long",
               f32="float[::1]", f64="double[::1]", i32="int[::1]", i64="long long[::1]")
cpdef object data_array(datatype, shape, data)

@cython.locals(fields=dict, name=object, datatype=object, shape=object, data=object, listed=list,
               d=object, dims=tuple)
cdef object _plain_parts(object item)

@cython.locals(parts=tuple)
cpdef object plain_input(item)

@cython.locals(key=list, feed=dict, parts=tuple, name=object)
cpdef object plain_inputs(items)
