"""Structured Streaming sinks: into lake streams (exactly once) and into NATS."""
