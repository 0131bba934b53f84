"""The ``jsspark`` command line: the nats CLI's stream, consumer, pub and context verbs over a lake,
and ``run`` for job files (a stream's mirror, sources and republish as Spark queries).

Engine verbs never start Spark and never import pyspark, so they answer in well under a
second; only ``run`` starts Spark. ``main.py`` wires the verbs, each concept has its own module.
"""
