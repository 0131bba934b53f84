"""Fixtures for job tests: the live tests' sync NATS client on the module's private server."""

from tests.live.conftest import nats  # noqa: F401 - a fixture, shared with tests/live
