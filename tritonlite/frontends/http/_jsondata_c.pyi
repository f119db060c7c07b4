# The compiled twin has exactly the Python twin's API; its types come from there.
from tritonlite.frontends.http._jsondata_py import COMPILED as COMPILED
from tritonlite.frontends.http._jsondata_py import data_array as data_array
from tritonlite.frontends.http._jsondata_py import plain_input as plain_input
from tritonlite.frontends.http._jsondata_py import plain_inputs as plain_inputs
