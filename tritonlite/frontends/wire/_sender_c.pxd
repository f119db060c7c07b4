# C types for _sender_py.py when Cython compiles it as tritonlite.frontends.wire._sender_c.
# Cython looks this file up by the compiled module's name, so it is named after _sender_c.
# Unlike the other twins' files, this one also holds the sending thread's C code (the cdef
# inline functions below): it runs without the GIL, so it cannot be written as Python; the
# Python source keeps the loop's side and runs the same steps inline when it is not compiled.
# cython: language_level=3

cimport cython
from cpython.ref cimport PyObject

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_mutex_init(pthread_mutex_t*, void*)
    int pthread_mutex_lock(pthread_mutex_t*)
    int pthread_mutex_unlock(pthread_mutex_t*)
    int pthread_cond_init(pthread_cond_t*, void*)
    int pthread_cond_wait(pthread_cond_t*, pthread_mutex_t*)
    int pthread_cond_signal(pthread_cond_t*)
    int pthread_cond_broadcast(pthread_cond_t*)

cdef extern from "<sys/socket.h>" nogil:
    ssize_t c_send "send" (int, const void*, size_t, int)
    int MSG_NOSIGNAL
    int MSG_DONTWAIT

cdef extern from "<errno.h>" nogil:
    int errno
    int EAGAIN
    int EWOULDBLOCK
    int EINTR

cdef extern from "<stdlib.h>" nogil:
    void* malloc(size_t)
    void free(void*)

cdef extern from "<unistd.h>" nogil:
    int c_close "close" (int)

cdef extern from "<string.h>" nogil:
    void* memcpy(void*, const void*, size_t)


# One response's bytes, queued for the thread or kept back on a blocked connection.
cdef struct Job:
    Job* next
    Link* link
    size_t n
    size_t off  # bytes of it already sent
    char* data  # n bytes, allocated with the job


# A connection's state as the thread sees it (inside its Channel object, which stays alive
# while ``pending`` > 0: its dealloc waits for that).
cdef struct Link:
    int fd  # the Channel's own duplicate of the socket's descriptor
    Py_ssize_t pending  # jobs in the thread's queue (sent, dropped or kept back: out of it)
    bint dead  # a send failed: what comes after is dropped
    bint reclaiming  # the loop was asked to take back kept-back bytes
    Job* kept  # bytes the socket did not take, in order (the first partly sent)
    Job* kept_tail
    PyObject* owner  # the Channel


cdef struct Core:
    pthread_mutex_t mu
    pthread_cond_t work  # the thread waits here for jobs
    pthread_cond_t done  # the loop waits here for a connection's jobs (settle)
    Job* head
    Job* tail
    bint sleeping
    bint stop
    bint running
    Py_ssize_t queued
    Py_ssize_t sent
    Py_ssize_t wakes


ctypedef Job* JobPtr
ctypedef Core* CorePtr


cdef class Sender:
    cdef Core core
    cdef public object _thread

    @cython.locals(job=JobPtr, wake=bint, n=Py_ssize_t)
    cpdef submit(self, Channel chan, bytes data)


# its dealloc needs ``sender`` (the queue's lock): a collection must not clear it first
@cython.no_gc_clear
cdef class Channel:
    cdef Link link
    cdef public Sender sender
    cdef public object loop
    cdef public object reclaim
    cdef public int fd
    cdef public object _kept_py
    cdef public bint _dead_py
    cdef public bint _reclaiming_py
    cdef public bint released

    cpdef bint busy(self)

    @cython.locals(job=JobPtr, nxt=JobPtr, out=list,
                   core=CorePtr)
    cpdef bytes settle(self)


cdef inline void _keep(Link* link, Job* job) noexcept nogil:
    job.next = NULL
    if link.kept_tail == NULL:
        link.kept = job
    else:
        link.kept_tail.next = job
    link.kept_tail = job


cdef inline bint _send_job(Link* link, Job* job) noexcept nogil:
    """Send what the socket takes without waiting; True when the job is done with (sent, or
    dropped on a dead connection), False when it must be kept back."""
    cdef ssize_t r
    while job.off < job.n:
        r = c_send(link.fd, job.data + job.off, job.n - job.off, MSG_NOSIGNAL | MSG_DONTWAIT)
        if r > 0:
            job.off += <size_t>r
        elif r < 0 and errno == EINTR:
            continue
        elif r < 0 and (errno == EAGAIN or errno == EWOULDBLOCK):
            return False
        else:  # the peer is gone (EPIPE, ECONNRESET, ...): the loop hears of it on its read
            link.dead = True
            return True
    return True


cdef inline void _run(Core* core) noexcept nogil:
    """The thread's body: take jobs in order, send each, until ``stop``."""
    cdef Job* job
    cdef Link* link
    cdef bint reclaim
    while True:
        pthread_mutex_lock(&core.mu)
        while core.head == NULL and not core.stop:
            core.sleeping = True
            pthread_cond_wait(&core.work, &core.mu)
        core.sleeping = False
        job = core.head
        if job == NULL:  # stopped, nothing left
            core.running = False
            pthread_cond_broadcast(&core.done)
            pthread_mutex_unlock(&core.mu)
            return
        core.head = job.next
        if core.head == NULL:
            core.tail = NULL
        pthread_mutex_unlock(&core.mu)
        link = job.link
        reclaim = False
        # only this thread touches the socket and ``kept`` while the link has pending jobs
        if link.dead:
            free(job)
        elif link.kept != NULL:
            _keep(link, job)  # behind bytes already kept back: order first
        elif _send_job(link, job):
            free(job)
        else:
            _keep(link, job)
            reclaim = not link.reclaiming
            link.reclaiming = True
        if reclaim:
            with gil:
                (<Channel>link.owner)._kept_back()
        pthread_mutex_lock(&core.mu)
        core.sent += 1
        link.pending -= 1
        if link.pending == 0:
            pthread_cond_broadcast(&core.done)
        pthread_mutex_unlock(&core.mu)
