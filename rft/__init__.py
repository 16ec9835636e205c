"""rft: event-sourced reinforcement fine-tuning of LLMs on Kafka and S3.

Explorers, trainers and sinks never talk to each other directly: every fact is an Avro event on a
Kafka topic and every model version an immutable checkpoint in object storage.
"""

__version__ = "0.1.0"
