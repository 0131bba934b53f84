"""Long-running Structured Streaming jobs over lake streams (mirror, source, republish)."""
