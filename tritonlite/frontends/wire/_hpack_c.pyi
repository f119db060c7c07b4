# The compiled twin has exactly the Python twin's API; its types come from there.
from tritonlite.frontends.wire._hpack_py import COMPILED as COMPILED
from tritonlite.frontends.wire._hpack_py import STATIC_TABLE as STATIC_TABLE
from tritonlite.frontends.wire._hpack_py import Decoder as Decoder
from tritonlite.frontends.wire._hpack_py import Encoder as Encoder
from tritonlite.frontends.wire._hpack_py import HeaderListTooLarge as HeaderListTooLarge
from tritonlite.frontends.wire._hpack_py import HpackError as HpackError
