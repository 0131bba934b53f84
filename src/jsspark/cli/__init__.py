"""The ``jsspark`` command line: the nats CLI's stream, consumer, pub and context verbs over a lake.

Engine verbs never start Spark and never import pyspark, so they answer in well under a
second; ``main.py`` wires the verbs, each concept has its own module.
"""
