# C types for _hpack_py.py when Cython compiles it as tritonlite.frontends.wire._hpack_c.
# Cython looks this file up by the compiled module's name, so it is named after _hpack_c;
# the Python source stays the single definition of behaviour.
# cython: language_level=3

cimport cython

cdef long long _INT_MAX
cdef int _INT_MAX_SHIFT
cdef int _HD_EMIT
cdef int _HD_FAIL
cdef tuple _STATIC
cdef dict _STATIC_FULL
cdef dict _STATIC_NAME
cdef bytes _HE_CODES
cdef bytes _HE_LENGTHS
cdef bytes _HD_NEXT
cdef bytes _HD_FLAGS
cdef bytes _HD_SYM
cdef bytes _HD_ACCEPT

@cython.locals(out=bytearray, p="const unsigned char *", o="unsigned char *",
               nxt="const unsigned char *", flags="const unsigned char *",
               syms="const unsigned char *", accept="const unsigned char *",
               state="unsigned int", t="unsigned int", flag="unsigned char",
               byte="unsigned char", i=Py_ssize_t, j=Py_ssize_t)
cdef bytes _huffman_decode(const unsigned char *data, Py_ssize_t start, Py_ssize_t length)

@cython.locals(lengths=bytes, lp="const unsigned char *", bits=Py_ssize_t, c="unsigned char")
cdef Py_ssize_t _huffman_length(bytes s) except -1

@cython.locals(mask=Py_ssize_t)
cdef void _put_int(bytearray out, int flags, int prefix, Py_ssize_t value) except *

@cython.locals(n=Py_ssize_t, hlen=Py_ssize_t, codes=bytes, lengths=bytes,
               cp="const unsigned char *", lp="const unsigned char *",
               acc="unsigned long long", nacc=int, bits=int, code="unsigned long long",
               k=Py_ssize_t, c="unsigned char")
cdef void _put_string(bytearray out, bytes s, bint huffman) except *


@cython.final
cdef class Decoder:
    cdef list _entries
    cdef Py_ssize_t _size
    cdef Py_ssize_t _capacity
    cdef Py_ssize_t _max_table_size
    cdef bint _update_required
    cdef Py_ssize_t _pos
    cdef public Py_ssize_t max_header_list_size

    @cython.locals(data=bytes, p="const unsigned char *", end=Py_ssize_t, headers=list,
                   limit=Py_ssize_t, total=Py_ssize_t, over=bint, seen=bint,
                   byte="unsigned char", entry=tuple, name=bytes, size=Py_ssize_t)
    cpdef list decode(self, block)

    @cython.locals(pos=Py_ssize_t, mask=Py_ssize_t, value=Py_ssize_t, digit=Py_ssize_t,
                   shift=int, byte="unsigned char")
    cdef Py_ssize_t _int(self, const unsigned char *p, Py_ssize_t end, int prefix) except -1

    @cython.locals(pos=Py_ssize_t, huffman=int, length=Py_ssize_t)
    cdef bytes _string(self, const unsigned char *p, Py_ssize_t end)

    @cython.locals(entry=tuple)
    cdef bytes _name(self, const unsigned char *p, Py_ssize_t end, Py_ssize_t index)

    @cython.locals(i=Py_ssize_t, n=Py_ssize_t)
    cdef tuple _entry(self, Py_ssize_t index)

    @cython.locals(size=Py_ssize_t)
    cdef void _add(self, tuple entry) except *

    @cython.locals(n=Py_ssize_t, entries=list, entry=tuple)
    cdef void _evict(self) except *


@cython.final
cdef class Encoder:
    cdef Py_ssize_t _limit
    cdef Py_ssize_t _capacity
    cdef bint _pending
    cdef Py_ssize_t _pending_min
    cdef list _entries
    cdef Py_ssize_t _first
    cdef Py_ssize_t _size
    cdef dict _full
    cdef dict _names
    cdef frozenset _unindexed
    cdef frozenset _sensitive

    @cython.locals(capacity=Py_ssize_t)
    cpdef set_max_table_size(self, Py_ssize_t size)

    @cython.locals(out=bytearray, name=bytes, value=bytes, key=tuple, index=Py_ssize_t,
                   k=Py_ssize_t, size=Py_ssize_t)
    cpdef bytes encode(self, headers, bint huffman=*)

    cdef Py_ssize_t _index(self, Py_ssize_t k)

    @cython.locals(k=Py_ssize_t)
    cdef void _add(self, tuple entry, Py_ssize_t size) except *

    @cython.locals(n=Py_ssize_t, k=Py_ssize_t, entries=list, entry=tuple)
    cdef void _evict(self) except *
