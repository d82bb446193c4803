"""PartitionChangeBuilder (protocol/controller/change_builder.py) on its own: build() runs the named
steps in Kafka's order, and the steps work on a registration without any broker state."""
import ast
import inspect
import textwrap
from types import SimpleNamespace as NS

from protocol.config import EngineConfig
from protocol.controller.change_builder import PartitionChangeBuilder

KAFKA_ORDER = ["complete_reassignment_if_needed", "maybe_populate_target_elr", "try_election",
               "trigger_leader_epoch_bump_for_reassignment_if_needed", "maybe_update_record_elr", "write_isr",
               "maybe_update_last_known_leader", "set_assignment_changes"]


def test_build_calls_the_steps_in_kafkas_order():
    src = textwrap.dedent(inspect.getsource(PartitionChangeBuilder.build))
    calls = [n.func.attr for n in ast.walk(ast.parse(src))
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"]
    assert calls == KAFKA_ORDER


def reg(**kw):
    base = dict(replicas=[1, 2, 3], isr=[1, 2, 3], elr=[], lke=[], leader=1, lrs="RECOVERED", adding=[],
                removing=[], conf=EngineConfig({"min.insync.replicas": "2"}).topic_conf())
    base.update(kw)
    return NS(**base)


def build(p, **kw):
    cfg = EngineConfig({})
    acc = kw.pop("acc", lambda r: True)
    return PartitionChangeBuilder(p, cfg, acc=acc, longest_log=lambda reps, acc: None, **kw).build()


def test_fenced_leader_leaves_and_the_next_isr_member_leads():
    rec, info = build(reg(), target_isr=[2, 3], acc=lambda r: r != 1)
    assert rec == {"isr": [2, 3], "leader": 2} and (info.kind, info.candidates) == ("ISR", [2, 3])


def test_below_min_isr_the_leavers_become_elr():
    rec, info = build(reg(isr=[1, 2]), target_isr=[1])
    assert rec == {"isr": [1], "elr": [2]} and info is None


def test_nothing_to_change_is_no_record():
    assert build(reg()) == (None, None)
