"""The JSON shape JetStream uses: Go's ``encoding/json`` with ``omitempty`` tags.

Every config model lists, in ``_always``, the fields the server always writes (no
``omitempty`` in its Go struct); any other field is left out when it holds its zero value
(``""``, ``0``, ``False``, ``[]``, ``{}``, an enum's first member) or, for pointer fields, when it is ``None``. Fields the
model does not know are kept as they came and written back after the known ones, so a config
from a newer server survives a round trip; a create or update request refuses them as the
server's strict decoder does (``unknown_field``).
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError, model_validator

from jsspark.config.timestamps import UTCTime


class WireModel(BaseModel):
    """Base of every config model: wire field names, zero-value defaults, extras preserved."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, validate_default=True)

    _always: ClassVar[frozenset[str]] = frozenset()
    _unknown_to_server: ClassVar[frozenset[str]] = frozenset()
    """Fields of the design documents that nats-server 2.15 does not know yet."""

    _go_request: ClassVar[str] = ""
    """The server's Go request struct (path) this model is decoded into, named in its decode
    errors: ``StreamConfigRequest``, ``CreateConsumerRequest.config``."""

    _keys: tuple[str, ...] = PrivateAttr(default=())  # the document's key order

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        """Go's decoder leaves a field at its zero value on a JSON ``null`` (a pointer field at
        nil), so the server takes ``"max_msgs": null`` or ``"subjects": null``; only the enums'
        own decoders refuse it ("can not unmarshal"), so a null enum is left to fail here too."""
        if not isinstance(data, dict) or None not in data.values():
            return data
        fields = cls.model_fields
        return {k: v for k, v in data.items() if v is not None or (k in fields and _is_enum(fields[k].annotation))}

    @model_validator(mode="wrap")
    @classmethod
    def _remember_key_order(cls, data: Any, handler: Any) -> Any:
        model = handler(data)
        if isinstance(data, dict) and isinstance(model, WireModel):
            model._keys = tuple(data)
        return model

    def unknown_field(self) -> str | None:
        """The first field, in the document's order, that the server's strict decoder does not
        know (Go's ``DisallowUnknownFields``, which reports the first one it meets), or None."""
        fields, extra = type(self).model_fields, self.model_extra or {}
        rest = [k for k in (*fields, *extra) if k not in self._keys]
        for key in (*self._keys, *rest):
            if key in extra or (key in self._unknown_to_server and getattr(self, key) is not None):
                return key
            value = getattr(self, key, None) if key in fields else None
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, WireModel) and (found := item.unknown_field()) is not None:
                    return found
        return None

    def to_json(self) -> dict[str, Any]:
        """The dict exactly as the server writes it (same keys present and omitted)."""
        out: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if name not in self._always and _is_empty(value):
                continue
            out[name] = _encode(value)
        out.update(self.model_extra or {})
        return out

    def to_json_str(self) -> str:
        """``to_json()`` as compact JSON text, ready to send as a request body."""
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def from_json(cls, data: dict[str, Any] | str | bytes) -> Self:
        """Parse the server's JSON (a dict or its text); durations may also be Go strings."""
        if isinstance(data, str | bytes):
            data = json.loads(data)
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            refused = _refused_decode(cls, data, e)
            if refused is None:
                raise
            raise refused from None

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> Self:
        """A config as this library stored it in a lake's catalog: ``from_json``, but a duration
        an earlier version let through beyond Go's ``int64`` is read back as it is."""
        return cls.model_validate(data, context={"stored": True})


def _refused_decode(cls: type[WireModel], data: Any, e: ValidationError) -> Exception | None:
    """A value the server's decoder refuses, as it refuses it (10025 with its decoder's text):
    a value an enum does not take, one no Go ``time.Duration`` holds (beyond ``int64``, not
    a whole number, not a number), or a time ``time.Parse`` refuses. Go's decoder reports the first such field in the document,
    and a field it does not know that comes before it wins (``json: unknown field``)."""
    from jsspark.config.durations import UNDECODABLE
    from jsspark.config.timestamps import BAD_TIME
    from jsspark.config.validation import go_quote
    from jsspark.errors import api_error

    if not isinstance(data, dict):
        return None
    order = {key: i for i, key in enumerate(data)}
    bad = [
        err for err in e.errors()
        if err["loc"] and err["loc"][0] in order
        and (err["type"] in (UNDECODABLE, BAD_TIME) or (err["type"] == "enum" and len(err["loc"]) == 1))
    ]  # fmt: skip
    if not bad:
        return None
    first = min(bad, key=lambda err: order[err["loc"][0]])  # min keeps the earliest of a field's own
    field = first["loc"][0]
    unknown = next(
        (k for k in data if order[k] < order[field] and (k not in cls.model_fields or k in cls._unknown_to_server)),
        None,
    )
    if unknown is not None:
        refused = api_error("JSInvalidJSONErr", err=f'json: unknown field "{unknown}"')
        field = unknown
    elif first["type"] == BAD_TIME:  # time.Time's own UnmarshalJSON error, without "json: "
        refused = api_error("JSInvalidJSONErr", err=first["ctx"]["err"])
        field = ".".join(str(p) for p in first["loc"])
    elif first["type"] == UNDECODABLE:
        path = ".".join(str(p) for p in (cls._go_request or cls.__name__, *first["loc"]))
        # Go names a struct field "Go struct field X.y", an array element just "X.y.0"
        into = path if isinstance(first["loc"][-1], int) else f"Go struct field {path}"
        value = first["ctx"]["value"]
        go_type = first["ctx"].get("go_type", "time.Duration")
        refused = api_error("JSInvalidJSONErr", err=f"json: cannot unmarshal {value} into {into} of type {go_type}")
        field = ".".join(str(p) for p in first["loc"])
    else:
        raw = json.dumps(first["input"])  # the bytes the decoder was given
        kind = cls.model_fields[field].annotation
        text = {"Compression": "unknown compression algorithm",
                "PriorityPolicy": f"unknown priority policy: {raw}"}.get(getattr(kind, "__name__", ""))
        refused = api_error("JSInvalidJSONErr", err=text or f"can not unmarshal {go_quote(raw)}")
    refused.field = field
    refused.args = (str(refused),)
    return refused


def _is_enum(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, Enum)


def _is_empty(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, WireModel):
        return False  # a pointer to a struct: present unless None
    if isinstance(value, Enum):
        return value is next(iter(type(value)))  # Go's iota zero, e.g. priority_policy "none"
    return value in ("", 0, False) or (isinstance(value, list | dict) and not value)


def _encode(value: Any) -> Any:
    if isinstance(value, WireModel):
        return value.to_json()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, UTCTime):
        return value.to_rfc3339nano()
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def nats_py_to_wire(kwargs: dict[str, Any]) -> dict[str, Any]:
    """nats-py keyword arguments to wire fields: ``None`` means unset, nested nats-py
    dataclasses become their wire dicts via ``as_dict()``."""

    def conv(value: Any) -> Any:
        if hasattr(value, "as_dict") and not isinstance(value, WireModel):
            return value.as_dict()
        if isinstance(value, list):
            return [conv(v) for v in value]
        return value

    return {k: conv(v) for k, v in kwargs.items() if v is not None}
