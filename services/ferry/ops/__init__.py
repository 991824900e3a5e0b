"""Recovery and operations: ``ferry replay``, ``ferry quarantine``, ``ferry status``.

Everything here talks to Kafka through confluent-kafka's AdminClient and plain (group-less)
consumers, with a timeout on every call; pure planning functions are separate from the calls so
they are unit-tested without a broker.
"""
