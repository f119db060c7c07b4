"""KServe v2 over HTTP (aiohttp)."""
