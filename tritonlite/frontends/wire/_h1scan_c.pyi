# The compiled twin has exactly the Python twin's API; its types come from there.
from tritonlite.frontends.wire._h1scan_py import scan as scan
