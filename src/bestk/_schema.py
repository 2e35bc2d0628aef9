"""What bestk's config schemas share (pydantic): value types, what a field wants, one-line errors.

The trainer's config (:mod:`bestk.train.config`) and the lab's settings (``BanditConfig``,
``DigitsConfig``, ``SparseConfig``, ``KappoLabConfig``) are pydantic schemas: each rule sits
beside its field (a type, a ``Literal``, ``Field(ge=..., gt=..., lt=...)``, a validator of that
field; a ``model_validator`` for a rule between fields), and pydantic checks them when a config
is built and whenever a field is assigned. Its errors become one-line ``ValueError`` s: a
validator's own message, else ``<field> must be <want>, got <value>`` (:func:`want`).

The value types keep OmegaConf's conversions (the trainer's configs were OmegaConf structured
configs): an integer field refuses booleans and floats (even ``2.0``), a number field refuses
booleans, a string field takes a number or a boolean as its text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

from pydantic import BeforeValidator, ConfigDict, ValidationError
from pydantic.dataclasses import dataclass as pydantic_dataclass
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError
from typing_extensions import dataclass_transform

__all__ = [
    "Int",
    "Float",
    "Str",
    "names_input",
    "SCHEMA_CONFIG",
    "want",
    "choices",
    "TYPE_ERRORS",
    "schema_dataclass",
    "SchemaChecks",
]


def _int_input(value: object) -> object:
    if isinstance(value, (bool, float)):
        raise PydanticCustomError("int_type", "not an integer")
    return value


def _float_input(value: object) -> object:
    if isinstance(value, bool):
        raise PydanticCustomError("float_type", "not a number")
    return value


def _str_input(value: object) -> object:
    return str(value) if isinstance(value, (bool, int, float)) else value


def names_input(value: object) -> object:
    """A list (or tuple) must hold names (strings) only; it becomes a list (error type
    ``names_type`` otherwise). Every other value is left to the field's type."""
    if isinstance(value, (list, tuple)):
        if not all(isinstance(v, str) for v in value):
            raise PydanticCustomError("names_type", "not a list of names")
        return list(value)
    return value


#: An integer (not a boolean, not a float); a string of digits is read.
Int = Annotated[int, BeforeValidator(_int_input)]
#: A number (not a boolean); an integer becomes a float, a numeric string is read.
Float = Annotated[float, BeforeValidator(_float_input)]
#: A string; a number or a boolean becomes its text.
Str = Annotated[str, BeforeValidator(_str_input)]

#: Unknown fields are errors, assignments are validated, floats are finite, the fields'
#: docstrings are their descriptions.
SCHEMA_CONFIG = ConfigDict(
    extra="forbid",
    validate_assignment=True,
    allow_inf_nan=False,
    use_attribute_docstrings=True,
)


def choices(values: tuple[object, ...]) -> str:
    """``a or b``, ``a, b or c``."""
    names = [str(c) for c in values]
    return " or ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " or " + names[-1]


def _bounds(info: FieldInfo) -> str:
    lo = hi = ""
    for m in info.metadata:
        for attr, fmt in (("ge", "[{}"), ("gt", "({}"), ("le", "{}]"), ("lt", "{})")):
            v = getattr(m, attr, None)
            if v is not None:
                text = fmt.format(f"{v:g}" if isinstance(v, float) else v)
                lo, hi = (text, hi) if attr[0] == "g" else (lo, text)
    if lo and hi:
        return f"in {lo}, {hi}"
    if lo:
        return (">= " if lo[0] == "[" else "> ") + lo[1:]
    if hi:
        return ("<= " if hi[-1] == "]" else "< ") + hi[:-1]
    return ""


def _unwrap(tp: object) -> object:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp


def want(info: FieldInfo) -> str:
    """What a value of the field must be, for messages: its ``json_schema_extra["want"]``,
    else the valid names of a ``Literal``, else its type and bounds (``an integer >= 1``,
    ``a number in [0, 1)``), with ``or null`` (and ``json_schema_extra["null"]``, what null
    means) for an optional field."""
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if "want" in extra:
        return str(extra["want"])
    args = get_args(info.annotation)
    nullable = type(None) in args
    tp = _unwrap(next(a for a in args if a is not type(None)) if nullable else info.annotation)
    if get_origin(tp) is Literal:
        text = choices(get_args(tp))
    else:
        kind = {int: "an integer", float: "a number", str: "a string"}.get(tp) \
            if isinstance(tp, type) else None
        if kind is None:
            kind = "a mapping" if tp is dict or get_origin(tp) is dict else "a list"
        bounds = _bounds(info)
        text = f"{kind} {bounds}" if bounds else kind
    if nullable:
        text += " or null" + (f" ({extra['null']})" if "null" in extra else "")
    return text


#: pydantic error types that mean "not a value of the field's type", and what it must be.
TYPE_ERRORS = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "string_type": "a string",
    "dict_type": "a mapping", "names_type": "a list of names", "finite_number": "a finite number",
}


def _field_message(e: ValidationError, fields: dict[str, FieldInfo]) -> str:
    """The first error of ``e`` on a flat schema of ``fields``, as one line."""
    err = e.errors()[0]
    if err["type"] == "value_error":  # a validator's own message
        return str(err["msg"]).removeprefix("Value error, ")
    loc = [str(p) for p in err["loc"]]
    name = loc[0] if loc else "?"
    if err["type"] == "unexpected_keyword_argument" or name not in fields:
        return f"unknown setting {name!r}; valid: {', '.join(fields)}"
    if len(loc) > 1 and err["type"] in TYPE_ERRORS:  # an item of a sequence
        return f"{name}[{loc[1]}] must be {TYPE_ERRORS[err['type']]}, got {err.get('input')!r}"
    return f"{name} must be {want(fields[name])}, got {err.get('input')!r}"


T = TypeVar("T")


class SchemaChecks:
    """Base of a :func:`schema_dataclass`: :meth:`validate` checks every field and rule again
    (construction and assignment already do; a caller that was handed a config states that
    it is valid)."""

    def validate(self) -> None:
        """Check every field and rule again (``ValueError`` naming the field)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        type(self)(**values)


@dataclass_transform()
def schema_dataclass(cls: type[T]) -> type[T]:
    """``cls`` (a :class:`SchemaChecks`) as a pydantic dataclass validated on construction and
    on assignment (:data:`SCHEMA_CONFIG`), whose errors are one-line ``ValueError`` s naming
    the field; a plain dataclass for everything else (``dataclasses.asdict``, ``fields``).
    Type checkers see a dataclass (``dataclass_transform``)."""
    # pydantic's dataclass type has no __init__ / __setattr__ to replace as far as typing goes
    model: Any = pydantic_dataclass(config=SCHEMA_CONFIG)(cls)
    init: Callable[..., None] = model.__init__
    setattr_: Callable[..., None] = model.__setattr__

    def fields() -> dict[str, FieldInfo]:
        return model.__pydantic_fields__

    def __init__(self: object, *args: object, **kwargs: object) -> None:
        try:
            init(self, *args, **kwargs)
        except ValidationError as e:
            raise ValueError(_field_message(e, fields())) from None

    def __setattr__(self: object, name: str, value: object) -> None:
        try:
            setattr_(self, name, value)
        except ValidationError as e:
            raise ValueError(_field_message(e, fields())) from None

    model.__init__ = __init__
    model.__setattr__ = __setattr__
    typed: type[T] = model
    return typed
