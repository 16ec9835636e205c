"""First contact with the configured services: a component checks, before it starts work, that
its Kafka and object store answer at all (above rft.stack and rft.storage, which it probes)."""
