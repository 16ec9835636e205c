"""The record size check refuses, before the client does, every record the client would refuse.

librdkafka's own check runs in `produce()` without a broker (the producer below points nowhere);
kafka-python's is its batch size estimate, which it compares with max.request.size. Whatever the
key, value and headers, a record that passes rft's check must pass the client's, and a record the
check refuses is over the limit by the check's own count, named in the error.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, Producer
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from rft.errors import RecordTooLargeError
from rft.events.record_size import record_bytes, refuse_oversized

LIMIT = 4000
PRODUCER = Producer(
    {"bootstrap.servers": "127.0.0.1:9", "message.max.bytes": LIMIT, "log_level": 0}
)

header_lists = st.lists(
    st.tuples(st.text(min_size=1, max_size=20), st.binary(max_size=200)), max_size=3
)


@settings(max_examples=300, deadline=None)
@given(st.integers(LIMIT - 400, LIMIT + 50), st.binary(max_size=40) | st.none(), header_lists)
def test_what_rft_accepts_both_clients_accept(
    value_size: int, key: bytes | None, headers: list[tuple[str, bytes]]
) -> None:
    value = b"v" * value_size
    try:
        refuse_oversized("t", value, key, headers, LIMIT, "message.max.bytes")
    except RecordTooLargeError as exc:
        assert record_bytes(value, key, headers) > LIMIT
        assert f"is {record_bytes(value, key, headers):,} bytes" in str(exc)
        return
    try:
        PRODUCER.produce("t", value, key=key, headers=headers)
    except KafkaException as exc:  # pragma: no cover - the failure this test exists to catch
        pytest.fail(f"rft accepted a record librdkafka refuses: {exc}")
    estimate = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, headers)
    assert estimate <= LIMIT, "rft accepted a record kafka-python refuses"


def test_the_error_names_topic_key_sizes_limit_and_setting() -> None:
    with pytest.raises(RecordTooLargeError) as caught:
        refuse_oversized("p.n.experiences", b"x" * 5000, b"task-1", [], LIMIT, "message.max.bytes")
    assert str(caught.value).startswith(
        f"record for p.n.experiences (key 'task-1') is {record_bytes(b'x' * 5000, b'task-1', []):,}"
        f" bytes (5,000 of them the event), over the producer's limit of 4,000 bytes "
        "(message.max.bytes, set in stack.kafka.extra;"
    )
