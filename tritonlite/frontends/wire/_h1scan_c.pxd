# C types for _h1scan_py.py when Cython compiles it as tritonlite.frontends.wire._h1scan_c.
# Cython looks this file up by the compiled module's name, so it is named after _h1scan_c;
# the Python source stays the single definition of behaviour.
# cython: language_level=3

cimport cython

cdef int _SP
cdef int _HT
cdef int _CR
cdef int _LF
cdef int _COLON
cdef int _COMMA
cdef int _QMARK
cdef int _SLASH
cdef Py_ssize_t _MAX_DIGITS
cdef Py_ssize_t _MAX_METHOD
cdef bytes _TCHAR
cdef bytes _URLCHAR
cdef bytes _VALCHAR
cdef bytes _DIGIT
cdef bytes _LOWER
cdef tuple _METHOD_BYTES
cdef tuple _METHODS
cdef tuple _NAME_BYTES
cdef tuple _NAMES
cdef Py_ssize_t _N_LENGTH
cdef Py_ssize_t _N_CONNECTION
cdef Py_ssize_t _N_LLHTTP
cdef tuple _TOKEN_BYTES
cdef Py_ssize_t _T_CLOSE
cdef Py_ssize_t _T_KEEP

@cython.locals(lower="const unsigned char*", name=bytes, q="const unsigned char*",
               k=Py_ssize_t, j=Py_ssize_t)
cdef Py_ssize_t _match(const unsigned char* p, Py_ssize_t a, Py_ssize_t n, tuple names,
                       bint fold) noexcept

@cython.locals(tchar="const unsigned char*", flags=int, i=Py_ssize_t, t=Py_ssize_t,
               k=Py_ssize_t)
cdef int _connection(const unsigned char* p, Py_ssize_t a, Py_ssize_t e) noexcept

@cython.locals(p="const unsigned char*", n=Py_ssize_t, tchar="const unsigned char*",
               valchar="const unsigned char*", digit="const unsigned char*", urlchar="const unsigned char*",
               i=Py_ssize_t, m=Py_ssize_t, u=Py_ssize_t, q=Py_ssize_t, ue=Py_ssize_t,
               minor=int, status=int, header_bytes=Py_ssize_t, headers=dict,
               length="long long", flags=int, a=Py_ssize_t, ne=Py_ssize_t, v=Py_ssize_t,
               ve=Py_ssize_t, k=Py_ssize_t, j=Py_ssize_t, c="unsigned char", f=int,
               end=Py_ssize_t, keep_alive=bint, key=str, text=str, old=object)
cpdef object scan(bytes data, Py_ssize_t pos, Py_ssize_t max_header_bytes,
                  Py_ssize_t max_headers)
