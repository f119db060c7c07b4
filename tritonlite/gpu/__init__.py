"""GPU plumbing behind capability checks: importable, and inert, on machines without CUDA."""
