"""The Kubernetes API-server seam: the only package that will import an API client library.

Only the DRA front end (and the CLI's doctor) import it; the device-plugin front end never does,
and `serve` in device-plugin mode loads none of it (an import-linter contract and a test keep
both true), so that mode's memory at rest does not grow with the client.
"""
