# cython: language_level=3, annotation_typing=False, boundscheck=False, wraparound=False
"""One whole, plain HTTP/1.1 request read in one pass: ``Http1Protocol``'s fast path.

``scan`` reads the request that starts at ``pos`` in a buffer when the buffer holds all of it
(request line, headers and the Content-Length body) and it is of the plain kind: a known
method, an origin-form target of URL-safe ASCII, ``HTTP/1.0`` or ``HTTP/1.1``, CRLF line ends,
header names of token characters right before their colon, values of visible ASCII, spaces
and tabs, at most one Content-Length of digits only, Connection tokens llhttp reads the same
way. Anything else -- Transfer-Encoding, Upgrade, Proxy-Connection, an incomplete message,
a byte llhttp might reject or read otherwise -- is ``None``, and llhttp (``httptools``) parses
the bytes, as it does every request the fast path declines. So on what it takes, ``scan`` gives
what llhttp's callbacks give (``_http1_py``: the URL, each header with its leading whitespace
dropped and its trailing kept, lower-case names with repeats joined by ``", "``, the keep-alive
rule of ``llhttp_should_keep_alive``), and the limits the callbacks apply, in the same order:
a URL over ``max_header_bytes`` is 414, a header past ``max_header_bytes`` or ``max_headers``
names is 431 (the headers before it are kept, as the callbacks had them).

Compiled by Cython through ``_h1scan_c.pxd`` (a C loop over the buffer's bytes; the header
names a client usually sends are matched in place, not decoded and lowered); the pure twin is
the same source.
"""

from __future__ import annotations

from typing import Any

_SP = 32
_HT = 9
_CR = 13
_LF = 10
_COLON = 58
_COMMA = 44
_QMARK = 63
_SLASH = 47
_MAX_DIGITS = 15  # a longer Content-Length is llhttp's to judge (its overflow check)
_MAX_METHOD = 7


def _table(chars: bytes) -> bytes:
    t = bytearray(256)
    for c in chars:
        t[c] = 1
    return bytes(t)


_ALNUM = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
# RFC 9110 tchar: what a header name or a Connection token is made of
_TCHAR = _table(_ALNUM + b"!#$%&'*+-.^_`|~")
# unreserved, sub-delims, ":@/?%": what llhttp takes in a path and query in every mode
_URLCHAR = _table(_ALNUM + b"-._~!$&'()*+,;=:@/?%")
# visible ASCII, space, tab: a header value's bytes (obs-text and CTLs are llhttp's)
_VALCHAR = _table(bytes(range(0x21, 0x7F)) + b" \t")
_DIGIT = _table(b"0123456789")
_LOWER = bytes(c + 32 if 65 <= c <= 90 else c for c in range(256))

_METHOD_BYTES = (b"GET", b"POST", b"PUT", b"DELETE", b"HEAD", b"OPTIONS", b"PATCH")
_METHODS = ("GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH")

# Header names matched in place (any case), the common ones first; the last three make the
# request llhttp's (their framing or connection semantics are not the fast path's).
_NAME_BYTES = (
    b"host",
    b"content-length",
    b"content-type",
    b"accept",
    b"user-agent",
    b"connection",
    b"inference-header-content-length",
    b"accept-encoding",
    b"content-encoding",
    b"expect",
    b"transfer-encoding",
    b"upgrade",
    b"proxy-connection",
)
_NAMES = tuple(n.decode("ascii") for n in _NAME_BYTES)
_N_LENGTH = 1
_N_CONNECTION = 5
_N_LLHTTP = 10  # this one and after: declined

_TOKEN_BYTES = (b"close", b"keep-alive", b"upgrade")
_T_CLOSE = 0
_T_KEEP = 1


def _match(p: Any, a: int, n: int, names: tuple[bytes, ...], fold: bool) -> int:
    """The index in ``names`` of ``p[a:a+n]`` (letters folded to lower case if ``fold``),
    or -1."""
    lower = _LOWER
    for k in range(len(names)):
        name = names[k]
        if len(name) != n:
            continue
        q = name
        j = 0
        if fold:
            while j < n and lower[p[a + j]] == q[j]:
                j += 1
        else:
            while j < n and p[a + j] == q[j]:
                j += 1
        if j == n:
            return k
    return -1


def _connection(p: Any, a: int, e: int) -> int:
    """llhttp's reading of a Connection value ``p[a:e]``: bit 1 ``close``, bit 2
    ``keep-alive``; -1 when the value is not a plain token list (empty tokens, a token with
    inner spaces or other bytes) or names ``upgrade``: llhttp decides those."""
    tchar = _TCHAR
    flags = 0
    i = a
    while True:
        while i < e and (p[i] == _SP or p[i] == _HT):
            i += 1
        t = i
        while i < e and tchar[p[i]]:
            i += 1
        if i == t:
            return -1
        k = _match(p, t, i - t, _TOKEN_BYTES, True)
        if k == _T_CLOSE:
            flags |= 1
        elif k == _T_KEEP:
            flags |= 2
        elif k >= 0:
            return -1
        while i < e and (p[i] == _SP or p[i] == _HT):
            i += 1
        if i == e:
            return flags
        if p[i] != _COMMA:
            return -1
        i += 1


def scan(data: bytes, pos: int, max_header_bytes: int, max_headers: int) -> Any:
    """The plain request at ``data[pos:]``, or None (llhttp's to parse).

    Returns ``(status, end, method, url, path, query, headers, minor, keep_alive, length,
    header_bytes, body)``: ``status`` 0, or the 414/431 the limits give (then only ``url``,
    ``headers`` -- those before the refused one -- and ``header_bytes`` are what the callbacks
    had); ``end`` the offset after the request; ``length`` the Content-Length (-1: none);
    ``body`` its bytes (None when there are none).
    """
    p = data
    n = len(data)
    tchar = _TCHAR
    valchar = _VALCHAR
    digit = _DIGIT
    # request line
    i = pos
    while i < n and i - pos <= _MAX_METHOD and p[i] != _SP:
        i += 1
    if i >= n or p[i] != _SP:
        return None
    m = _match(p, pos, i - pos, _METHOD_BYTES, False)
    if m < 0:
        return None
    i += 1
    if i >= n or p[i] != _SLASH:
        return None
    u = i
    q = -1
    urlchar = _URLCHAR
    while i < n and urlchar[p[i]]:
        if q < 0 and p[i] == _QMARK:
            q = i
        i += 1
    ue = i
    if i + 10 > n or p[i] != _SP:
        return None
    if (
        p[i + 1] != 72  # H
        or p[i + 2] != 84  # T
        or p[i + 3] != 84  # T
        or p[i + 4] != 80  # P
        or p[i + 5] != _SLASH
        or p[i + 6] != 49  # 1
        or p[i + 7] != 46  # .
        or (p[i + 8] != 48 and p[i + 8] != 49)  # 0 or 1
        or p[i + 9] != _CR
        or i + 10 >= n
        or p[i + 10] != _LF
    ):
        return None
    minor = p[i + 8] - 48
    i += 11
    status = 0
    header_bytes = ue - u
    if header_bytes > max_header_bytes:
        status = 414
    headers: dict[str, str] = {}
    length = -1
    flags = 0
    # header fields, up to the blank line
    while True:
        if i + 1 >= n:
            return None
        if p[i] == _CR:
            if p[i + 1] != _LF:
                return None
            i += 2
            break
        a = i
        while i < n and tchar[p[i]]:
            i += 1
        if i >= n or i == a or p[i] != _COLON:
            return None
        ne = i
        i += 1
        while i < n and (p[i] == _SP or p[i] == _HT):
            i += 1
        v = i
        while i < n and valchar[p[i]]:
            i += 1
        if i + 1 >= n or p[i] != _CR or p[i + 1] != _LF:
            return None
        ve = i
        i += 2
        k = _match(p, a, ne - a, _NAME_BYTES, True)
        if k >= _N_LLHTTP:
            return None
        if k == _N_LENGTH:
            if length >= 0 or ve == v or ve - v > _MAX_DIGITS:
                return None  # a repeat, empty, or long enough for llhttp's overflow check
            length = 0
            j = v
            while j < ve:
                c = p[j]
                if not digit[c]:
                    return None
                length = length * 10 + (c - 48)
                j += 1
        elif k == _N_CONNECTION:
            f = _connection(p, v, ve)
            if f < 0:
                return None
            flags |= f
        if status:
            continue  # refused: the rest is only checked (llhttp would have taken it)
        header_bytes += (ne - a) + (ve - v) + 4
        if header_bytes > max_header_bytes or len(headers) >= max_headers:
            status = 431
            continue
        key = _NAMES[k] if k >= 0 else data[a:ne].decode("latin-1").lower()
        text = data[v:ve].decode("latin-1")
        old = headers.get(key)
        headers[key] = text if old is None else old + ", " + text
    end = i
    body = None
    if length > 0:
        end = i + length
        if end > n:
            return None
        body = p[i:end]  # a bytes copy: of the pointer's bytes when compiled
    url = p[u:ue]
    if q >= 0:
        path = data[u:q].decode("latin-1")
        query = data[q + 1 : ue].decode("latin-1")
    else:
        path = data[u:ue].decode("latin-1")
        query = ""
    # llhttp_should_keep_alive: HTTP/1.1 unless "close", HTTP/1.0 only with "keep-alive"
    keep_alive = not (flags & 1) if minor == 1 else (flags & 2) != 0
    return (
        status,
        end,
        _METHODS[m],
        url,
        path,
        query,
        headers,
        minor,
        keep_alive,
        length,
        header_bytes,
        body,
    )
