"""The project's exception tree.

Every error rft raises on purpose derives from `RftError`, so callers (and the CLI) can catch one
root. Errors from outside clients are translated at the wrapper boundary with `raise ... from exc`.
"""

from __future__ import annotations


class RftError(Exception):
    """Root of every error raised by rft."""


class ConfigError(RftError):
    """A config file or value is invalid; the message names the key and what was expected."""


class StackError(RftError):
    """The local stack (Kafka, MinIO) could not be provisioned, started or stopped."""


class DecodeError(RftError):
    """Bytes could not be decoded into an event."""


class TruncatedEventError(DecodeError):
    """The bytes end before the event does."""


class UnknownSchemaError(DecodeError):
    """The fingerprint names no schema in the catalog (or the registry)."""


class CorruptEventError(DecodeError):
    """The bytes are not a valid event: bad magic, bad body, trailing bytes, absurd lengths."""


class EncodeError(RftError):
    """An event does not match its schema."""


class TransportError(RftError):
    """The event plane (Kafka) failed: broker unreachable, delivery failed, commit failed."""


class FencedError(RftError):
    """Another process took over this process's role (a newer producer with its transactional id,
    or another writer created the checkpoint version it was writing): it must publish nothing more
    and exit."""


# The exit status of an `rft` process that was fenced (rft/cli/main.py). A supervisor must not
# restart it: the process that fenced it holds its role now, and a restart would fence that one
# back, each taking the run from the other in turn.
FENCED_EXIT_CODE = 4


class RecordTooLargeError(RftError):
    """A record is over the producer's record size limit; it was refused before sending (not an
    outage: sending it again cannot succeed)."""


class BrokerUnavailableError(TransportError):
    """Kafka did not answer in time and nothing was lost: the same call may be made again
    (records still queued, a transaction step that timed out, a commit that found no
    coordinator). The outage window retries these; anything else is not retried."""


class StorageError(RftError):
    """The object store failed or an object is missing."""


class OutageError(RftError):
    """A service (Kafka, the object store) stayed unreachable past its `outage_timeout`; the
    message names the service and its address. Deliberately neither a TransportError nor a
    StorageError: callers that handle those (a refused checkpoint, a skipped commit) must not
    swallow an outage that outlived its window."""


class UnreachableAddressError(ConfigError):
    """At startup nothing answered at a configured address: a config error, not an outage (the
    outage window applies only to a service this process has reached once)."""


class CheckpointError(StorageError):
    """A checkpoint is incomplete, unverifiable or corrupt; it must not be loaded."""


class TasksetError(RftError):
    """A taskset row or file is malformed; the message names file:line."""


class EngineError(RftError):
    """A rollout or trainer engine failed (model load, generation, optimizer step)."""


class MetricSinkError(RftError):
    """A metric sink (file, database, tracking client) could not open, write or close."""


class LaunchError(RftError):
    """`rft run` could not place its processes (no Ray cluster, a placement that does not fit)."""


class ReplayError(RftError):
    """A replay, export, import or re-score cannot go on; the message names the topic, partition
    and offset, or the file and row, it stopped at."""
