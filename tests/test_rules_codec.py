"""protocol/codec.py framing: b"IF" + version byte + zlib(pickle), with hand-written blobs."""
import pickle
import zlib

import pytest

from protocol.codec import CodecError, decode, encode


def test_a_version_2_blob_written_by_hand_still_decodes():
    """Checkpoints outlive releases: the version-2 layout must stay readable."""
    blob = b"IF" + bytes([2]) + zlib.compress(pickle.dumps(("state", 1, [2, 3]), protocol=4))
    assert decode(blob) == ("state", 1, [2, 3])


def test_encode_framing():
    blob = encode((1, None, "x"))
    assert blob[:2] == b"IF"
    assert pickle.loads(zlib.decompress(blob[3:])) == (1, None, "x")


@pytest.mark.parametrize("blob", [b"", b"IF", b"XY\x02" + zlib.compress(pickle.dumps(1)), b"IX\x02abc"])
def test_not_a_state_blob(blob):
    with pytest.raises(CodecError, match="not an isrflow state blob"):
        decode(blob)


def test_unknown_version_is_refused_by_number():
    with pytest.raises(CodecError, match="version 200"):
        decode(b"IF" + bytes([200]) + zlib.compress(pickle.dumps(1)))


def test_roundtrip_every_event_with_requests_in_flight():
    """Explicit delivery keeps AlterPartition requests/responses and pending leader state across
    events; encoding the state after every event must change nothing (the Spark state store)."""
    from tests.engine_util import canonical, run_events
    from tests.gen import random_schedule
    phases = set()
    for seed in range(8):
        events = random_schedule(seed, 300, explicit_ap=True, explicit_md=True, max_unclean=1)
        cfg = {"min.insync.replicas": "2", "delivery.alter_partition": "explicit",
               "delivery.metadata": "explicit"}
        a = run_events(events, cfg)
        b = run_events(events, cfg, roundtrip_every=1)
        assert canonical(a) == canonical(b), seed
        phases |= {r["phase"] for r in a.get("alter_partition", [])}
    assert {"PROPOSED", "ACCEPTED", "REJECTED", "APPLIED", "IGNORED"} <= phases, phases


def test_an_alter_partition_answer_stored_before_its_broker_epoch_was_kept_reads_with_none():
    """A state blob written before an AlterPartition answer kept its request's broker epoch holds
    four fields; it reads with -1 (no process waits for it), a new one round-trips its epoch."""
    from protocol.codec import _ap_response_in
    from protocol.messages import AlterPartitionResponse, as_tuple
    old = _ap_response_in((3, 1, "INVALID_UPDATE_VERSION", None))
    assert old == AlterPartitionResponse(3, 1, "INVALID_UPDATE_VERSION", None, -1)
    new = AlterPartitionResponse(4, 1, None, None, 101)
    assert _ap_response_in(as_tuple(new)) == new
