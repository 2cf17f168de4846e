"""Declared parameters and state: one params record and one state record per algorithm.

A learner's parameters are a frozen dataclass of :class:`Params` (``kw_only``), one field per
parameter, whose :func:`param` metadata carries the default and the bounds;
:meth:`Params.read` turns a config's ``params`` into that record, naming the parameter and the
rule in every error. A learner's state is a dataclass of :class:`State` whose fields name the
learner attributes the state log keeps, with their types; :func:`dump` and :func:`load` turn
those attributes into JSON and back (numpy arrays, deques, tuples and the learner's components,
such as a regression oracle, included). What differs between algorithms is then only what they
declare, as river reads an estimator's parameters from its ``__init__``.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True, kw_only=True)
... class WindowParams(Params):
...     target_coverage: float = param(0.9, gt=0, lt=1, what="target coverage", former="alpha")
...     window: int = param(1000, ge=1, what="retained scores")
>>> WindowParams.read({"alpha": 0.8})
WindowParams(target_coverage=0.8, window=1000)
>>> for bad in ({"window": 0}, {"window": "all"}, {"window": 10**30},
...             {"alpha": 0.8, "target_coverage": 0.8}, {"windows": 5}):
...     try:
...         WindowParams.read(bad)
...     except LearnerError as error:
...         print(error)
parameter 'window' (retained scores) must be >= 1, got 0
parameter 'window' must be int, got 'all'
parameter 'window' must be at most 9007199254740992, got 10**30
give 'target_coverage' (or its former name 'alpha'), not both
unknown parameter(s) 'windows'; known: alpha, target_coverage, window
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections import deque
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import MISSING, dataclass, field
from typing import Any, ClassVar, Self

import numpy as np

from banditflow.learners.base import JSON, LearnerError

# Integer parameters are exact in a float (what JSON clients and the learners' arithmetic
# assume); sizes have their own, smaller caps (``cap``).
MAX_INT_PARAM = 2**53

# --- parameters ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """What one parameter may be (see :func:`param`)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[Any, ...] = ()
    cap: int | None = None
    what: str = ""
    former: str | None = None
    convert: Callable[[Any], Any] | None = None


def param(
    default: Any = MISSING,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: tuple[Any, ...] = (),
    cap: int | None = None,
    what: str = "",
    former: str | None = None,
    convert: Callable[[Any], Any] | None = None,
) -> Any:
    """A parameter field: its ``default`` (none: required; ``None``: optional) and its rule.

    ``ge``/``gt``/``le``/``lt`` bound a number, ``choices`` lists the values a text may take,
    ``cap`` bounds an integer's magnitude (:data:`MAX_INT_PARAM` by default), ``what`` says what
    the parameter is in error messages, ``former`` is a former name still accepted, and
    ``convert`` replaces the conversion the field's type implies (e.g. ``bool`` of anything).
    A parameter given as ``null`` takes its default.
    """
    rule = Rule(ge, gt, le, lt, tuple(choices), cap, what, former, convert)
    return field(default=default, metadata={"param": rule})


class Params:
    """Base of the params records: frozen, ``kw_only`` dataclasses of :func:`param` fields."""

    _fields: ClassVar[dict[type, list[tuple[str, type | None, Rule, Any]]]] = {}
    _named: ClassVar[dict[type, dict[str, tuple[str, type | None, Rule, Any]]]] = {}

    @classmethod
    def names(cls) -> frozenset[str]:
        """Every name a config may give: the fields and their former names."""
        declared = cls._declared()
        return frozenset(
            [name for name, *_ in declared]
            + [rule.former for _, _, rule, _ in declared if rule.former]
        )

    @classmethod
    def read(cls, given: Mapping[str, Any]) -> Self:
        """The record of a config's ``params``; :class:`LearnerError` names a bad parameter."""
        check_unknown(given, cls.names())
        values = {entry[0]: _read(given, *entry) for entry in cls._declared()}
        return cls(**values).validated()

    @classmethod
    def read_one(cls, given: Mapping[str, Any], name: str) -> Any:
        """One parameter of a config, checked as :meth:`read` checks it (for the family's
        statistics hooks, which see the config's ``params`` at every event)."""
        return _read(given, *cls._by_name()[name])

    def validated(self) -> Self:
        """Rules between parameters, and defaults that depend on others (``dataclasses.replace``
        returns the completed record); raise :class:`LearnerError`. None by default."""
        return self

    @classmethod
    def _by_name(cls) -> dict[str, tuple[str, type | None, Rule, Any]]:
        if cls not in Params._named:
            Params._named[cls] = {entry[0]: entry for entry in cls._declared()}
        return Params._named[cls]

    @classmethod
    def _declared(cls) -> list[tuple[str, type | None, Rule, Any]]:
        if cls not in Params._fields:
            hints = typing.get_type_hints(cls)
            Params._fields[cls] = [
                (f.name, _scalar(hints[f.name]), f.metadata.get("param", Rule()), f.default)
                for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                if f.init
            ]
        return Params._fields[cls]


def _read(given: Mapping[str, Any], name: str, kind: type | None, rule: Rule,
          default: Any) -> Any:
    """Parameter ``name`` of ``given`` (or its former name), checked, or its default."""
    shown, value = name, given.get(name)
    if rule.former is not None and rule.former in given:
        if name in given:
            raise LearnerError(f"give {name!r} (or its former name {rule.former!r}), not both")
        shown, value = rule.former, given[rule.former]
    if value is None:
        if default is MISSING:
            raise LearnerError(f"parameter {name!r}{_what(rule)} is required")
        return default
    return _checked(shown, value, kind, rule)


def _scalar(hint: Any) -> type | None:
    """int, float, bool or str for a field of that type (or that type or None), else None:
    the value is taken as given (a list, a mapping) and the record checks it."""
    options = [a for a in typing.get_args(hint) if a is not type(None)] if _union(hint) else [hint]
    if len(options) == 1 and options[0] in (int, float, bool, str):
        return options[0]
    return None


def _union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _checked(name: str, value: Any, kind: type | None, rule: Rule) -> Any:
    if rule.convert is not None:
        converted = rule.convert(value)
    elif kind is bool:
        if not isinstance(value, bool):
            raise LearnerError(f"parameter {name!r} must be true or false, got {value!r}")
        converted = value
    elif kind in (int, float):
        try:
            converted = kind(value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise LearnerError(
                f"parameter {name!r} must be {kind.__name__}, got {value!r}"
            ) from exc
        if isinstance(converted, float) and not math.isfinite(converted):
            raise LearnerError(f"parameter {name!r} must be finite, got {value!r}")
        limit = rule.cap if rule.cap is not None else MAX_INT_PARAM if kind is int else None
        if limit is not None and abs(converted) > limit:
            raise LearnerError(
                f"parameter {name!r} must be at most {limit}, got {short(converted)}"
            )
    elif kind is str:
        converted = str(value)
    else:
        converted = value
    if rule.choices and converted not in rule.choices:
        raise LearnerError(f"parameter {name!r}{_what(rule)} must be {_either(rule.choices)}, "
                           f"got {short(value)}")
    if not _within(converted, rule):
        raise LearnerError(f"parameter {name!r}{_what(rule)} must be {_bounds(rule)}, "
                           f"got {converted}")
    return converted


def _what(rule: Rule) -> str:
    return f" ({rule.what})" if rule.what else ""


def _either(choices: tuple[Any, ...]) -> str:
    """``'a' or 'b'``, ``'a', 'b' or 'c'``."""
    shown = [repr(choice) for choice in choices]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


def _within(value: Any, rule: Rule) -> bool:
    return not (
        (rule.ge is not None and value < rule.ge)
        or (rule.gt is not None and value <= rule.gt)
        or (rule.le is not None and value > rule.le)
        or (rule.lt is not None and value >= rule.lt)
    )


def _bounds(rule: Rule) -> str:
    """``>= 1``, ``> 0``, ``in (0, 1)``, ``in (0, 0.5]``."""
    low = rule.ge if rule.ge is not None else rule.gt
    high = rule.le if rule.le is not None else rule.lt
    if low is not None and high is not None:
        return (f"in {'[' if rule.ge is not None else '('}{low}, {high}"
                f"{']' if rule.le is not None else ')'}")
    if low is not None:
        return f"{'>=' if rule.ge is not None else '>'} {low}"
    return f"{'<=' if rule.le is not None else '<'} {high}"


def check_unknown(params: Mapping[str, Any], known: AbstractSet[str]) -> None:
    """Reject parameters the algorithm does not know (typos would otherwise pass silently)."""
    unknown = sorted(set(params) - known)
    if unknown:
        names = ", ".join(map(repr, unknown))
        raise LearnerError(f"unknown parameter(s) {names}; known: {', '.join(sorted(known))}")


def short(value: Any) -> str:
    """``value`` for an error message: a huge integer as a power of ten, not 5,000 digits."""
    if isinstance(value, int) and abs(value) > 10**15:
        return f"{'-' if value < 0 else ''}10**{len(str(abs(value))) - 1}"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


# --- state --------------------------------------------------------------------------------


class State:
    """Base of the state records: dataclasses (``kw_only``) whose fields name the attributes of
    a learner (or a part of one) that its state keeps, typed. The JSON of a state is an object
    with one member per field, in field order. A field's default is its value when a state
    lacks it (states written before the field existed).

    Types: int, float, bool, str (or None), ``list``, ``deque``, ``tuple``, ``dict[str, ...]``
    of those, ``Annotated[np.ndarray, Array(...)]``, ``Any`` (kept as it is), and a
    component: an object with ``to_state()`` and ``load_state(state)`` (an oracle, a
    schedule), restored into the component the learner's parameters built.
    """


@dataclass(frozen=True)
class Array:
    """How a numpy array field is kept: ``Annotated[np.ndarray, Array(...)]``, with the
    array's ``dtype`` and the type its entries are written as (``int`` for counts kept as
    floats; None: ``tolist()``)."""

    dtype: type = float
    written_as: type | None = None


Encode = Callable[[Any], Any] | None  # None: the value is its JSON as it is
Decode = Callable[[Any, Any], Any]  # (JSON value, current attribute value) -> new value
_codecs: dict[type, list[tuple[str, Encode, Decode, Any, bool]]] = {}
_dumps: dict[type, Callable[[object], JSON]] = {}
_NO_DEFAULT = object()


def dump(owner: object, record: type[State]) -> JSON:
    """The JSON-serialisable state of ``owner``: its attributes named by ``record``."""
    if record not in _dumps:
        _dumps[record] = _compiled_dump(_codec(record))
    return _dumps[record](owner)


def _compiled_dump(codec: list[tuple[str, Encode, Decode, Any, bool]]) -> Callable[[object], JSON]:
    """``dump`` for one record as a function that builds the dict literally, as a hand-written
    ``to_state`` would (it runs at every commit of a changed learner; dataclasses compiles
    its ``__init__`` the same way). Field names are identifiers, so the source is safe."""
    encoders: dict[str, Any] = {}
    members = []
    for index, (name, encode, *_) in enumerate(codec):
        if encode is None:
            members.append(f"{name!r}: owner.{name}")
        else:
            encoders[f"encode{index}"] = encode
            members.append(f"{name!r}: encode{index}(owner.{name})")
    exec(f"def dump(owner):\n    return {{{', '.join(members)}}}\n", encoders)
    return encoders["dump"]  # type: ignore[no-any-return]


def load(owner: object, record: type[State], state: Mapping[str, Any]) -> None:
    """Set the attributes of ``owner`` named by ``record`` from :func:`dump` output (or from an
    older state: a field with a default may be missing). Components are restored in
    place; the other attributes are set once every field has been read."""
    values = {}
    for name, _, decode, absent, component in _codec(record):
        if name in state:
            value = decode(state[name], getattr(owner, name))
        elif absent is not _NO_DEFAULT:
            value = decode(absent, getattr(owner, name))
        else:
            raise LearnerError(f"the learner state has no {name!r}")
        if not component:
            values[name] = value
    for name, value in values.items():
        setattr(owner, name, value)


def _codec(record: type[State]) -> list[tuple[str, Encode, Decode, Any, bool]]:
    if record not in _codecs:
        hints = typing.get_type_hints(record, include_extras=True)
        codec = []
        for f in dataclasses.fields(record):  # type: ignore[arg-type]
            encode, decode = _coder(hints[f.name], f.name)
            absent = _NO_DEFAULT if f.default is MISSING else f.default
            codec.append((f.name, encode, decode, absent, _component(hints[f.name])))
        _codecs[record] = codec
    return _codecs[record]


def _component(hint: Any) -> bool:
    return isinstance(hint, type) and hasattr(hint, "to_state") and hasattr(hint, "load_state")


def _coder(hint: Any, name: str) -> tuple[Encode, Decode]:
    """The encoder and decoder of a value of type ``hint``."""
    if typing.get_origin(hint) is typing.Annotated:
        return _array_coder(typing.get_args(hint)[1], name)
    if _union(hint):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        encode, decode = _coder(options[0], name)
        return (None if encode is None else lambda v: None if v is None else encode(v),
                lambda d, current: None if d is None else decode(d, current))
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in (int, float, bool, str):
        return None, lambda d, current: hint(d)
    if hint is Any:
        return None, lambda d, current: d
    if origin in (list, deque):
        encode_item, decode_item = _coder(args[0], name)
        if args[0] in (int, float, bool, str):  # (the common case: as fast as it can be)
            return list, lambda d, current: origin(map(args[0], d))
        return (list if encode_item is None else lambda v: [encode_item(x) for x in v],
                lambda d, current: origin(decode_item(x, None) for x in d))
    if origin is tuple:
        coders = [_coder(arg, name) for arg in args]
        return (lambda v: [x if e is None else e(x) for (e, _), x in zip(coders, v, strict=True)],
                lambda d, current: tuple(dec(x, None) for (_, dec), x in zip(coders, d,
                                                                               strict=True)))
    if origin is dict:
        encode_item, decode_item = _coder(args[1], name)
        encode_all = (dict if encode_item is None
                      else lambda v: {k: encode_item(x) for k, x in v.items()})
        if _component(args[1]):  # components keyed by name, each restored in place
            return encode_all, lambda d, current: {k: decode_item(d[k], x)
                                                   for k, x in current.items()}
        return encode_all, lambda d, current: {str(k): decode_item(x, None) for k, x in d.items()}
    if _component(hint):
        def restore(d: Any, current: Any) -> Any:
            current.load_state(d)
            return current
        return (lambda v: v.to_state()), restore
    raise TypeError(f"state field {name!r}: no codec for {hint!r}")


def _array_coder(storage: Array, name: str) -> tuple[Encode, Decode]:
    written = storage.written_as

    def encode(value: np.ndarray) -> Any:
        return value.tolist() if written is None else [written(x) for x in value]

    def decode(data: Any, current: Any) -> np.ndarray:
        array = np.array(data, dtype=storage.dtype)
        if isinstance(current, np.ndarray) and array.shape != current.shape:
            if array.ndim == current.ndim == 1:
                raise LearnerError(f"state {name!r} has {array.shape[0]} values, expected "
                                   f"{current.shape[0]}")
            raise LearnerError(f"state {name!r} has shape {array.shape}, expected "
                               f"{current.shape}")
        return array

    return encode, decode


# --- a learner's methods from its declarations ---------------------------------------------


class Declared:
    """The :class:`banditflow.learners.base.Learner` methods that read the algorithm's
    declarations: ``from_params`` (``cls(cls.Params.read(params))``), ``parameters``,
    ``to_state`` and ``load_state``. A family's base class lists it before ``Learner``; each
    algorithm sets ``Params`` and ``State`` and takes its params record in ``__init__``."""

    Params: ClassVar[type[Params]]
    State: ClassVar[type[State]]

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Self:
        """A fresh learner; raises :class:`LearnerError` naming any bad parameter."""
        return cls(cls.Params.read(params))  # type: ignore[call-arg]

    @classmethod
    def parameters(cls) -> frozenset[str]:
        """Every parameter ``from_params`` accepts."""
        return cls.Params.names()

    def state_record(self) -> type[State]:
        """The record of this learner's state: ``State``, or a variant its parameters choose
        (e.g. with the fields of an optional feature)."""
        return self.State

    def to_state(self) -> JSON:
        """Compact JSON-serialisable state (parameters are stored separately)."""
        return dump(self, self.state_record())

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Replace this learner's state with ``state`` (from ``to_state``)."""
        load(self, self.state_record(), state)
        self.restored()

    def restored(self) -> None:
        """Rebuild what the loaded state determines (sorted copies, caches) and check it
        against the parameters; raise :class:`LearnerError`. Nothing by default."""
