# C types for _http1_py.py when Cython compiles it as tritonlite.frontends.wire._http1_c.
# Cython looks this file up by the compiled module's name, so it is named after _http1_c;
# the Python source stays the single definition of behaviour.
# cython: language_level=3

cimport cython

cdef int _IDLE
cdef int _HEAD
cdef int _BODY
cdef int _DONE
cdef tuple _V11
cdef tuple _V10
cdef Py_ssize_t _SMALL
cdef bytes _CONTINUE
cdef str _HEALTH
cdef Py_ssize_t _BLOCK_MIN
cdef str _INFER
cdef double _OVERCAP_TIMEOUT
cdef Py_ssize_t _FRAMING_PER_BYTE
cdef dict _STATUS_LINES


cdef class Request:
    cdef public Http1Protocol _proto
    cdef public str method
    cdef public str path
    cdef public str query
    cdef public object headers
    cdef public dict _headers
    cdef public tuple version
    cdef public object peer
    cdef public bytes _url
    cdef public object _body
    cdef public Py_ssize_t _size
    cdef public Py_ssize_t _length
    cdef public Py_ssize_t _header_bytes
    cdef public Py_ssize_t _framing
    cdef public bint _complete
    cdef public bint _keep_alive
    cdef public bint _expect
    cdef public bint _close
    cdef public object _encoding
    cdef public object _waiter
    cdef public object _error
    cdef public object _refusal
    cdef public bint _admitted
    cdef public bint _asked


@cython.final
cdef class _ChunkWriter:
    cdef Http1Protocol _proto
    cdef bint _chunked


cdef class Http1Protocol:
    cdef public object _service
    cdef public object _dispatch
    cdef public object _json_infer
    cdef public Py_ssize_t _max_body
    cdef public Py_ssize_t _max_header_bytes
    cdef public Py_ssize_t _max_headers
    cdef public Py_ssize_t _max_pipeline
    cdef public double _header_timeout
    cdef public double _body_timeout
    cdef public double _keepalive_timeout
    cdef public object _loop
    cdef public object _transport
    cdef public object _parser
    cdef public object _peer
    cdef public Request _cur
    cdef public object _queue
    cdef public object _task
    cdef public int _state
    cdef public Py_ssize_t _head_pending
    cdef public bint _head_began
    cdef public double _deadline
    cdef public bint _closing
    cdef public bint _read_paused
    cdef public bint _write_paused
    cdef public object _drain_waiter
    cdef public bint _overcap
    cdef public bint _registered
    cdef public bint _eof
    cdef public bint _begun
    cdef public object _busy
    cdef public object _held
    cdef public object _chan
    cdef public object _scan
    cdef public object _reader

    @cython.locals(n=Py_ssize_t, pos=Py_ssize_t, head=tuple, status=int, end=Py_ssize_t,
                   minor=int, keep_alive=bint, length=Py_ssize_t, header_bytes=Py_ssize_t,
                   req=Request)
    cdef Py_ssize_t _parse_whole(self, bytes data) except -1
    cdef Request _begin_message(self)
    cdef _admit(self, Request req)
    cdef _enqueue(self, Request req)
    cdef _end_message(self, Request req)
    cdef _read_into_block(self, Request req)


cdef bint _takes_block(Request req)
