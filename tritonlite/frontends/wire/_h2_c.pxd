# C types for _h2_py.py when Cython compiles it as tritonlite.frontends.wire._h2_c.
# Cython looks this file up by the compiled module's name, so it is named after _h2_c;
# the Python source stays the single definition of behaviour. The frame, flag, error and
# setting constants become C ints here: Python code takes them from the pure twin (wire/h2.py).
# cython: language_level=3

cimport cython

cdef int DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY
cdef int WINDOW_UPDATE, CONTINUATION
cdef int END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG
cdef int NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR, SETTINGS_TIMEOUT
cdef int STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR
cdef int CONNECT_ERROR, ENHANCE_YOUR_CALM
cdef int S_HEADER_TABLE_SIZE, S_ENABLE_PUSH, S_MAX_CONCURRENT_STREAMS, S_INITIAL_WINDOW_SIZE
cdef int S_MAX_FRAME_SIZE, S_MAX_HEADER_LIST_SIZE
cdef int GRPC_INTERNAL, GRPC_RESOURCE_EXHAUSTED
cdef long long _MAX_WINDOW, _DEFAULT_WINDOW, _WU_PER_DATA
cdef Py_ssize_t _RECENT_RESETS, _SMALL_PIECE, _COALESCED, _BLOCK_AT, _BLOCK_MAX, _DIRECT_MIN
cdef Py_ssize_t _HINT_FRAME, _MAX_BLOCKS
cdef object _HDR, _PREFIX, _U32, _U32X2, _SETTING
cdef frozenset _CONNECTION_SPECIFIC

@cython.locals(c=cython.uchar)
cdef bint _name_ok(bytes name)

@cython.locals(c=cython.uchar, n=Py_ssize_t)
cdef bint _value_ok(bytes value)

@cython.locals(regular=bint, scheme=bint, authority=bint, content_length=cython.longlong,
               seen=int, bit=int, method=bytes, path=bytes, name=bytes, value=bytes)
cdef long long _request_ok(list headers) except? -3

@cython.locals(name=bytes, value=bytes)
cdef bint _trailers_ok(list headers) except -1


cdef _keep_piece(list chunks, bytes buf, Py_ssize_t a, Py_ssize_t b)


@cython.final
cdef class _Stream:
    cdef public unsigned int sid
    cdef public bint remote_closed, local_closed, closed
    cdef public long long recv_window, unacked, send_window
    cdef public bint reading, want_writable
    cdef public long long content_length, data_len
    cdef public list out
    cdef public long long out_len
    cdef public object out_trailers
    cdef public bint out_end, blocked, deferred
    cdef public bytes hdr
    cdef public long long msg_len
    cdef public int msg_flag
    cdef public list chunks
    cdef public object block
    cdef public long long got
    cdef public bint discard


@cython.final
cdef class H2Connection:
    cdef object _on_request, _on_message, _on_half_close, _on_grpc_error
    cdef object _on_reset, _on_writable, _on_goaway, _on_ping, _take
    cdef long long _max_streams, _stream_window, _max_frame, _max_header_list
    cdef long long _max_message, _max_buffered, _write_limit
    cdef double _flood_window
    cdef long long _max_resets, _max_pings, _max_settings, _max_empty, _max_wu, _max_cont
    cdef object _decoder
    cdef dict _streams
    cdef list _blocked
    cdef set _recent_resets
    cdef list _out
    cdef bint _gathered
    cdef public bint closed
    cdef public int error_code
    cdef public bint goaway_sent, peer_goaway
    cdef public long long data_sent
    cdef long long _last_sid
    cdef bint _preface, _got_settings
    cdef list _pending
    cdef Py_ssize_t _pending_len, _need
    cdef _Stream _dst
    cdef int _dflags
    cdef Py_ssize_t _dlength, _dleft
    cdef object _dview
    cdef _Stream _dview_st
    cdef long long _dview_got
    cdef Py_ssize_t _blocks, _last_data
    cdef list _hb
    cdef Py_ssize_t _hb_len
    cdef long long _hb_sid
    cdef bint _hb_end_stream, _hb_bad_priority
    cdef Py_ssize_t _hb_count
    cdef long long _recv_conn_window, _conn_window_size, _conn_unacked, _buffered
    cdef list _deferred
    cdef long long _send_conn_window, _peer_initial_window, _peer_max_frame, _wu_credit
    cdef double _t0
    cdef long long _pings, _settings, _empty, _wus
    cdef double _reset_tokens, _reset_t, _reset_rate

    cdef _keep(self, bytes rest, Py_ssize_t need)

    @cython.locals(st=_Stream, k=cython.longlong)
    cpdef recv_view(self)

    @cython.locals(st=_Stream)
    cpdef recv_done(self, Py_ssize_t n)

    cpdef int recv_hint(self)

    cdef _drop_block(self, _Stream st)

    @cython.locals(flag=int)
    cdef _complete(self, _Stream st)

    @cython.locals(pos=Py_ssize_t, n=Py_ssize_t, length=Py_ssize_t, ftype=int, flags=int,
                   sid=cython.longlong, now=double, buf=bytes)
    cpdef receive(self, data)

    cdef _frame(self, bytes buf, Py_ssize_t off, Py_ssize_t length, int ftype, int flags,
                long long sid)
    cdef _flood_empty(self)

    @cython.locals(end=Py_ssize_t, pad=Py_ssize_t, st=_Stream)
    cdef _data(self, bytes buf, Py_ssize_t off, Py_ssize_t length, int flags, long long sid)

    @cython.locals(st=_Stream)
    cdef _Stream _data_open(self, Py_ssize_t length, long long sid)

    @cython.locals(st=_Stream)
    cdef _data_begin(self, bytes buf, Py_ssize_t a, Py_ssize_t b, Py_ssize_t length, int flags,
                     long long sid)

    @cython.locals(st=_Stream)
    cdef _data_more(self, bytes buf, Py_ssize_t a, Py_ssize_t b)

    cdef _data_done(self, _Stream st)

    cdef _data_end(self, _Stream st, Py_ssize_t length, int flags)

    cdef _ack_stream(self, _Stream st)

    @cython.locals(flag=int, mlen=cython.longlong, take=Py_ssize_t, hdr=bytes)
    cdef _grpc_data(self, _Stream st, bytes buf, Py_ssize_t a, Py_ssize_t b)

    @cython.locals(other=_Stream, waiting=list)
    cdef _release(self, _Stream st)
    cdef _remote_end(self, _Stream st)

    @cython.locals(end=Py_ssize_t, pad=Py_ssize_t, bad_priority=bint, dep=cython.longlong)
    cdef _headers(self, bytes buf, Py_ssize_t off, Py_ssize_t length, int flags, long long sid)

    @cython.locals(block=bytes)
    cdef _continuation(self, bytes buf, Py_ssize_t off, Py_ssize_t length, int flags,
                       long long sid)

    @cython.locals(st=_Stream, content_length=cython.longlong, headers=list)
    cdef _block(self, long long sid, bytes block, bint end_stream, bint bad_priority)

    @cython.locals(inc=cython.longlong, st=_Stream)
    cdef _window_update(self, bytes buf, Py_ssize_t off, Py_ssize_t length, long long sid)

    @cython.locals(st=_Stream, code=cython.longlong)
    cdef _rst_stream(self, bytes buf, Py_ssize_t off, Py_ssize_t length, long long sid)

    @cython.locals(now=double, tokens=double)
    cdef _count_reset(self)

    @cython.locals(end=Py_ssize_t, grew=bint, ident=int, value=cython.longlong,
                   delta=cython.longlong, st=_Stream)
    cdef _settings_frame(self, bytes buf, Py_ssize_t off, Py_ssize_t length, int flags,
                         long long sid)

    cdef _ping(self, bytes buf, Py_ssize_t off, Py_ssize_t length, int flags, long long sid)

    @cython.locals(st=_Stream, dep=cython.longlong)
    cdef _priority(self, bytes buf, Py_ssize_t off, Py_ssize_t length, long long sid)

    cdef _fail(self, int code, bytes debug)
    cdef _send_rst(self, long long sid, int code)
    cdef _stream_error(self, _Stream st, int code)
    cdef _close(self, _Stream st)

    @cython.locals(n=Py_ssize_t, limit=Py_ssize_t, flags=int, pos=Py_ssize_t, k=Py_ssize_t,
                   last=int)
    cdef _emit_headers(self, long long sid, bytes block, bint end_stream)

    @cython.locals(k=cython.longlong, frame=cython.longlong, last=bint, m=Py_ssize_t,
                   chunks=list, out=list)
    cdef _flush(self, _Stream st)

    @cython.locals(st=_Stream, waiting=list)
    cdef _flush_blocked(self)

    cdef _local_end(self, _Stream st)

    @cython.locals(st=_Stream)
    cpdef send_headers(self, long long stream_id, bytes block, bint end_stream=*)

    @cython.locals(st=_Stream, n=Py_ssize_t, prefix=bytes)
    cpdef bint send_message(self, long long stream_id, payload, bint compressed=*) except -1

    @cython.locals(st=_Stream, n=Py_ssize_t, h=Py_ssize_t, t=Py_ssize_t)
    cpdef send_response(self, long long stream_id, bytes head, payload, bint compressed,
                        bytes trailers)

    @cython.locals(st=_Stream)
    cpdef end_stream(self, long long stream_id)

    @cython.locals(st=_Stream)
    cpdef reset(self, long long stream_id, int code=*)

    @cython.locals(st=_Stream)
    cpdef set_reading(self, long long stream_id, bint reading)

    cpdef goaway(self, int code=*, bytes debug=*)
