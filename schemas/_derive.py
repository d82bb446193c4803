"""Shared type vocabulary and schema derivation for the pydantic models.

Every column type used in `schemas.events` and `schemas.tables` is written
once, as an ``Annotated`` alias carrying an :class:`Arrow` marker (the
physical type) and its bounds. The Arrow and Spark schemas are derived from
the models' annotations here, never written by hand.
"""

import types
import typing
from typing import Annotated, Any, Literal, Union

import annotated_types as at
import pyarrow as pa
from pydantic import BaseModel


class Arrow:
    """Annotation marker: the Arrow (and hence Delta/Spark) type of a column."""

    __slots__ = ("type",)

    def __init__(self, type_: pa.DataType):
        self.type = type_

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"Arrow({self.type})"


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# The two integer widths. Every integer column is one of these (plus bounds).
Int = Annotated[int, Arrow(pa.int32()), at.Ge(INT32_MIN), at.Le(INT32_MAX)]
Long = Annotated[int, Arrow(pa.int64()), at.Ge(INT64_MIN), at.Le(INT64_MAX)]


def unwrap(annotation: Any) -> tuple[Any, list, bool]:
    """Strip ``Optional`` and ``Annotated`` layers.

    Returns (base type, flattened metadata list, nullable)."""
    meta: list = []
    nullable = False
    tp = annotation
    while True:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            args = typing.get_args(tp)
            tp = args[0]
            meta.extend(args[1:])
            continue
        if origin is Union or origin is types.UnionType:
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != len(typing.get_args(tp)):
                nullable = True
            if len(args) != 1:
                raise TypeError(f"unsupported union annotation {annotation!r}")
            tp = args[0]
            continue
        return tp, meta, nullable


def field_annotation(field_info) -> Any:
    """Re-attach the metadata pydantic moved off a FieldInfo's annotation."""
    if field_info.metadata:
        return Annotated[(field_info.annotation, *field_info.metadata)]
    return field_info.annotation


def arrow_type_of(annotation: Any) -> tuple[pa.DataType, bool]:
    """(Arrow type, nullable) of a model field annotation."""
    tp, meta, nullable = unwrap(annotation)
    for m in meta:
        if isinstance(m, Arrow):
            return m.type, nullable
    origin = typing.get_origin(tp)
    if tp is str:
        return pa.string(), nullable
    if tp is bool:
        return pa.bool_(), nullable
    if origin is Literal:
        vals = typing.get_args(tp)
        if all(isinstance(v, str) for v in vals):
            return pa.string(), nullable
        raise TypeError(f"unsupported Literal {tp!r}")
    if origin is list:
        (elem,) = typing.get_args(tp)
        et, _ = arrow_type_of(elem)
        return pa.list_(et), nullable
    if origin is dict:
        k, v = typing.get_args(tp)
        kt, _ = arrow_type_of(k)
        vt, _ = arrow_type_of(v)
        return pa.map_(kt, vt), nullable
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return pa.struct(list(model_arrow_schema(tp))), nullable
    if tp is int:
        raise TypeError("bare int annotation: use schemas._derive.Int or Long")
    raise TypeError(f"no Arrow type for annotation {annotation!r}")


def model_arrow_schema(model: type[BaseModel]) -> pa.Schema:
    """Arrow schema of a model: one field per model field, in declaration
    order; a field is nullable iff its annotation admits None."""
    fields = []
    for name, fi in model.model_fields.items():
        t, nullable = arrow_type_of(field_annotation(fi))
        fields.append(pa.field(name, t, nullable=nullable))
    return pa.schema(fields)


def spark_schema_from_arrow(schema: pa.Schema):
    """pyspark StructType for an Arrow schema (pyspark imported lazily)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


# --------------------------------------------------------------------------
# Does a Python value fit an Arrow column type? (input guard: a value from an
# untrusted row must be checked against the OUTPUT column it lands in before
# it reaches Arrow, or one bad row fails a whole micro-batch)
# --------------------------------------------------------------------------

_INT_BOUNDS = {
    pa.int8(): (-(2**7), 2**7 - 1),
    pa.int16(): (-(2**15), 2**15 - 1),
    pa.int32(): (INT32_MIN, INT32_MAX),
    pa.int64(): (INT64_MIN, INT64_MAX),
    pa.uint8(): (0, 2**8 - 1),
    pa.uint16(): (0, 2**16 - 1),
    pa.uint32(): (0, 2**32 - 1),
    pa.uint64(): (0, 2**64 - 1),
}


def int_bounds(t: pa.DataType) -> tuple[int, int]:
    """(min, max) of an Arrow integer type."""
    return _INT_BOUNDS[t]


def is_text(s: str) -> bool:
    """True if `s` can be written as UTF-8 (no lone surrogates, which JSON's
    ``\\ud800`` escapes and undecodable file names produce)."""
    if s.isascii():
        return True
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def safe_text(s: str) -> str:
    """`s` made writable as UTF-8: lone surrogates become ``\\udXXX`` escapes."""
    if is_text(s):
        return s
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


def fits(value: Any, t: pa.DataType) -> bool:
    """True if the Python `value` (not None) converts to Arrow type `t` as the
    same value: integers (not bools) within the type's range, UTF-8-encodable
    strings, booleans; lists element-wise. Other types: False."""
    if pa.types.is_integer(t):
        if type(value) is not int:
            return False
        lo, hi = _INT_BOUNDS[t]
        return lo <= value <= hi
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return type(value) is str and is_text(value)
    if pa.types.is_boolean(t):
        return type(value) is bool
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        et = t.value_type
        return type(value) is list and all(v is None or fits(v, et) for v in value)
    return False
