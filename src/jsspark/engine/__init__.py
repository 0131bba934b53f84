"""The stream engine: JetStream streams kept as Delta tables. Never imports pyspark."""
