"""The real local stack without Docker: a one-node Apache Kafka (KRaft) and a MinIO server,
provisioned into a cache, run detached under a data root, and driven by `rft stack up|down|status`.
"""

from rft.stack.local_stack import LocalStack, StackStatus, UpResult
from rft.stack.service import ServiceStatus
from rft.stack.stack_lease import StackLease

__all__ = ["LocalStack", "ServiceStatus", "StackLease", "StackStatus", "UpResult"]
