# The compiled twin has exactly the Python twin's API; its types come from there.
from tritonlite.core.runtime._lane_py import DirectLane as DirectLane
