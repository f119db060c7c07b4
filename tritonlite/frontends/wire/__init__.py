"""tritonlite's own wire layer: HTTP/1.1, HTTP/2 with HPACK, one-port detection, TLS/ALPN.

Each hot part is a Cython twin (``X_py.py`` is the source of truth, ``X_c`` its compiled build);
one selector module per twin chooses between them (for HPACK: ``wire.hpack``).
"""
