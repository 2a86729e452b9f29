"""Helpers shared by test suites (unit, integration, e2e): imported from here, never from
another test module."""
