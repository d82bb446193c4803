"""The protocol core as the simulator drives it (closed loop, VOPR style).

The simulator (jobs/simulate.py) holds no model of the controller. It feeds every row it writes,
in stream order, into a real `protocol.cluster.Cluster` built from the same engine config the
replay will use, and asks that core -- never a second model -- what clients and followers would
do next: who leads a partition, its replicas, a replica's log end offset and high watermark.
Because the core is deterministic and sees exactly the rows the replay will see, its answers
are the replay's state at that point of the stream.

Everything the simulator reads from protocol/ goes through this module (read-only accessors on
`Partition` / `Replica` attributes), so a change of those internals is fixed in one place. The
only writes are the two the next row's `Cluster.apply` would do first anyway (fire the sessions
and the partition's timers due by the row's time), done earlier so that the answer about the
leader is the one the row will meet.
"""
from __future__ import annotations

from typing import Mapping

from protocol.cluster import Cluster
from protocol.config import EngineConfig
from protocol.timers import advance as _advance_timers
from schemas.events import EVENT_ARROW_SCHEMA, validate

_LEADER = "LEADER"          # protocol.messages.LEADER (a replica's role)
_NO_LEADER = -1             # protocol.messages.NO_LEADER

# A validated event is a dict with exactly these keys, unused columns None (schemas.events.validate).
_BLANK = {f.name: None for f in EVENT_ARROW_SCHEMA}


class SimulationViolation(ValueError):
    """A protocol invariant broke while the simulator drove the core (``stop_on_violation``)."""

    def __init__(self, seed: int, seq: int, ts_ms: int, violations: list[dict]):
        v = violations[0]
        what = ", ".join(sorted({x.get("invariant", "?") for x in violations}))
        super().__init__(
            f"invariant violated at seed {seed}, step (seq) {seq}, ts_ms {ts_ms}: {what} on "
            f"{v.get('topic')}-{v.get('partition')}: {v.get('detail') or v}")
        self.seed, self.seq, self.ts_ms, self.violations = seed, seq, ts_ms, violations


class CoreDriver:
    """A Cluster fed row by row, with the questions the simulator asks it."""

    def __init__(self, config: Mapping[str, str], *, seed: int = 0, stop_on_violation: bool = False):
        self.cl = Cluster(EngineConfig(dict(config)))
        self.seed = seed
        self.stop = stop_on_violation
        self.parts: list = []            # global partition index -> Partition (after bootstrap)
        self.rejected: list[str] = []    # rows the core refused (a simulator bug; kept for the summary)
        self.violations = 0
        self.first_violation: dict | None = None
        self._viol = self.cl.out.tables["violations"]

    # ---------------------------------------------------------------- feeding
    def feed_raw(self, raw: dict) -> None:
        """A row as the stream writes it (schema-validated, like the replay does)."""
        ev, reason = validate(raw)
        if ev is None:
            self.rejected.append(reason)
            return
        self._apply(ev)

    def feed_fast(self, fields: dict) -> None:
        """A steady-state row whose columns are plain ints / enum strings: the validated form is
        the blank row with these columns (what `validate` returns for them; tests check it)."""
        ev = dict(_BLANK)
        ev.update(fields)
        self._apply(ev)

    def _apply(self, ev: dict) -> None:
        cl = self.cl
        before = cl.rejected
        cl.apply(ev)
        if cl.rejected != before:
            self.rejected.append(cl.out.tables["rejected"][-1]["reason"])
        if self._viol:
            self._on_violation(ev)

    def _on_violation(self, ev: dict) -> None:
        self.on_violation(ev["seq"], ev["ts_ms"])

    def on_violation(self, seq: int, ts: int) -> None:
        """The invariant checker reported violations at this step: count them; stop if asked."""
        vs = list(self._viol)
        self._viol.clear()
        self.violations += len(vs)
        if self.first_violation is None:
            v = vs[0]
            self.first_violation = {"seq": seq, "ts_ms": ts, "invariant": v.get("invariant"),
                                    "topic": v.get("topic"), "partition": v.get("partition")}
        if self.stop:
            raise SimulationViolation(self.seed, seq, ts, vs)

    def viol_rows(self) -> list:
        """The list the core appends violation rows to (until the next drain)."""
        return self._viol

    def note_rejections(self, n: int) -> None:
        """Rows fed straight to Cluster.apply that the core refused (a simulator bug)."""
        rows = self.cl.out.tables["rejected"]
        self.rejected += [r["reason"] for r in rows[-n:]] if rows else ["?"] * n

    def drain(self) -> None:
        """Drop the core's output rows (the replay makes its own); keep counting violations."""
        if self._viol:
            self._on_violation({"seq": self.cl.last_seq, "ts_ms": self.cl.max_ts})
        self.cl.drain()
        self.cl.take_touched()
        self._viol = self.cl.out.tables["violations"]

    def final_state_digest(self) -> str:
        """sha256 of the partition_state rows after the end-of-stream timers (what a replay's
        partition_state table holds): a replay of the stream under the same config reproduces it."""
        return state_digest(_finished(self.cl).partition_state_rows())

    def bind_partitions(self, keys: list[tuple[str, int]]) -> None:
        self.parts = [self.cl.partitions[k] for k in keys]

    # ---------------------------------------------------------------- questions
    def catch_up(self, gp: int, ts: int):
        """The partition as the next row at `ts` meets it: broker sessions and its timers due by
        ts fired (what Cluster.apply does first for that row)."""
        cl = self.cl
        if cl.sess_next is not None and ts >= cl.sess_next:
            cl.expire_sessions(ts)
        p = self.parts[gp]
        if ts > p.tdone:
            _advance_timers(p, ts)
            if self._viol:
                self._on_violation({"seq": cl.last_seq, "ts_ms": ts})
        return p

    @staticmethod
    def leader(p) -> int:
        """The broker serving as leader: the controller's leader whose replica has become leader
        (0: none)."""
        b = p.leader
        if b == _NO_LEADER:
            return 0
        rep = p.reps.get(b)
        return b if rep is not None and rep.role == _LEADER else 0

    def leaders(self) -> list[int]:
        lead = self.leader
        return [lead(p) for p in self.parts]

    @staticmethod
    def replicas(p) -> list[int]:
        return p.replicas

    @staticmethod
    def leo(p, b: int) -> int:
        rep = p.reps.get(b)
        return rep.log.leo if rep is not None else 0

    @staticmethod
    def hwm(p, b: int) -> int:
        rep = p.reps.get(b)
        return rep.log.hwm if rep is not None else 0


def _finished(cl: Cluster) -> Cluster:
    cl.finish()
    cl.drain()
    return cl


def state_digest(rows: list[dict]) -> str:
    """A digest of partition_state rows independent of their order."""
    import hashlib
    import json
    lines = sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()
