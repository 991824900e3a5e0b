"""Ferry: files from a NAS drop directory into Hive tables on a second Hadoop cluster.

Stages (extract, transform, transfer, load) are independent services that talk only through Kafka
topics carrying Avro file-manifest events. See README.md and docs/ for the architecture.
"""

__version__ = "0.1.0"
