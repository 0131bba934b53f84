"""Live NATS: read a JetStream server's stream into Spark exactly once, and publish back.

``options`` (connection options, secret redaction), ``consumer`` (create/bind/reset the origin
consumer), ``ingestor`` (driver-side subscription, flow-control acks that follow Spark's
checkpoint, gap repair), ``spill`` (delivered messages as Arrow files executors read),
``landing`` (store a batch in a lake stream in mirror or source form), ``publisher`` (the sink).
"""
