"""What every front end shares, below the wire layer and the HTTP/gRPC handlers: the call
interfaces, the error tables, the reject counter, the endpoint restrictions, header forwarding
and socket helpers. Nothing here imports another part of ``frontends``."""
