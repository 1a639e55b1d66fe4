"""The local broker helper: started for a run only where no broker is configured or listening."""

from __future__ import annotations

from pathlib import Path

from kafka import KafkaAdminClient

from rocescope.config import KafkaConfig
from rocescope.testbed.tansu import broker_unless_listening, free_port, listening, local_broker_if_needed


def test_a_configured_broker_is_never_replaced(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    assert local_broker_if_needed(KafkaConfig(bootstrap_servers=[address]), tmp_path) is None
    assert not listening(int(address.rsplit(":", 1)[1])), "nothing was started for a configured address"


def test_a_broker_starts_where_nothing_listens_and_only_there(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    local = broker_unless_listening(address, tmp_path)
    assert local is not None
    try:
        admin = KafkaAdminClient(bootstrap_servers=address)
        assert isinstance(admin.list_topics(), list)  # speaks Kafka
        admin.close()
        assert broker_unless_listening(address, tmp_path) is None, "a second run uses the broker that is there"
    finally:
        local.stop()
