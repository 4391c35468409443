"""The chart's generated value rules (scripts/render-chart-schema.py): build-time tooling that
the tests import, kept out of the installed package, which never runs it."""
