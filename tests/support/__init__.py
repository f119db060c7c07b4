"""Helpers shared by the test suites (import as ``support.<module>``)."""
