"""Go's integer types as the server's JSON decoder fills a config's integer fields.

A number outside the field's Go type (``int`` is 64-bit), a number written with a fraction or an
exponent (``5.0``, ``1e3``), a string, a bool, an array or an object does not decode: the server
answers 10025 ``json: cannot unmarshal number 9223372036854775808 into Go struct field ... of type
int``, which ``WireModel.from_json`` builds from the ``UNDECODABLE`` error raised here. ``null``
leaves Go's zero value. Before, such values were stored (``max_ack_pending=2**64``).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BeforeValidator, ValidationInfo
from pydantic_core import PydanticCustomError

from jsspark.config.durations import UNDECODABLE


def _go_integer(go_type: str, low: int, high: int) -> BeforeValidator:
    def check(value: Any, info: ValidationInfo) -> int:
        if value is None:
            return 0
        if type(value) is int and (low <= value <= high or (info.context and info.context.get("stored"))):
            return value  # a stored config is read back as an earlier version stored it
        if isinstance(value, bool):
            what = "bool"
        elif isinstance(value, int | float):
            what = f"number {json.dumps(value)}"
        elif isinstance(value, str):
            what = "string"
        elif isinstance(value, list | tuple):
            what = "array"
        elif isinstance(value, dict):
            what = "object"
        else:
            raise ValueError(f"a Go {go_type} must be a whole number, got {value!r}")
        raise PydanticCustomError(UNDECODABLE, "cannot unmarshal {value} into a Go {go_type}",
                                  {"value": what, "go_type": go_type})

    return BeforeValidator(check)


Int = Annotated[int, _go_integer("int", -(2**63), 2**63 - 1)]
"""Go's ``int`` (64-bit on every platform the server ships for)."""
Int32 = Annotated[int, _go_integer("int32", -(2**31), 2**31 - 1)]
Int64 = Annotated[int, _go_integer("int64", -(2**63), 2**63 - 1)]
UInt64 = Annotated[int, _go_integer("uint64", 0, 2**64 - 1)]
"""Go's ``uint64`` (sequences, ``rate_limit_bps``): a negative number does not decode either."""
