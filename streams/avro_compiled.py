"""Avro binary writers and readers compiled from a schema: generated Python functions.

fastavro's writer interprets the schema at every call (a dict lookup per type, a validation
pass per union branch): a Reward took ~24 us, a fifth of the reward joiner's CPU per event.
The compiled function writes the same bytes in a third of that. It covers what the platform's
schemas use (records, ``["null", T]`` unions, arrays, maps, enums, primitives, the uuid and
timestamp logical types over their plain values) and accepts only the plain Python values
``AvroRecord.to_record`` makes, by exact type (``int`` not ``bool``, ``list`` for an array,
``dict`` for a map, an ``int`` field within 32 bits: fastavro refuses the others in a union);
anything else (a missing field, a ``datetime``, another type, a value out of range) raises,
and `AvroCodec.encode` hands that record to fastavro, which applies defaults and conversions
or says what is wrong. So a record gets fastavro's bytes either way
(``tests/streams/test_avro_compiled.py`` compares them on every platform schema).

Readers likewise: the compiled reader of a schema reads a body written with that very schema
into plain values (logical types as their Avro values, as `AvroCodec.decode(plain=True)`
returns), in half of fastavro's time, and raises on anything unexpected (a truncated body, a
bad union index or enum symbol, invalid UTF-8, a boolean byte above 1): the codec then reads
the body again with fastavro, whose result or error stands.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

Writer = Callable[[Mapping[str, Any]], bytes]
Reader = Callable[[bytes, int], tuple[dict[str, Any], int]]  # (data, start) → (record, end)

_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_NUMBERS = frozenset({int, float})  # what a double or float field takes (not bool)
_SUPPORTED_LOGICAL = {
    ("string", "uuid"),
    ("long", "timestamp-millis"),
    ("long", "timestamp-micros"),
}


class Unsupported(Exception):
    """The schema uses a type the compiler leaves to fastavro."""


def write_long(out: bytearray, n: int) -> None:
    """Append the zig-zag varint of a 64-bit integer (Avro long)."""
    if type(n) is not int:
        raise TypeError(f"{type(n).__name__} is not an int")
    if not _LONG_MIN <= n <= _LONG_MAX:
        raise OverflowError(f"{n} does not fit an Avro long")
    n = (n << 1) ^ (n >> 63)
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def write_int(out: bytearray, n: int) -> None:
    """Append the zig-zag varint of a 32-bit integer (Avro int)."""
    if type(n) is int and not _INT_MIN <= n <= _INT_MAX:
        raise OverflowError(f"{n} does not fit an Avro int")
    write_long(out, n)


def write_bytes(out: bytearray, value: bytes) -> None:
    if type(value) not in (bytes, bytearray):
        raise TypeError(f"{type(value).__name__} is not bytes")
    write_long(out, len(value))
    out += value


_DOUBLE = struct.Struct("<d").pack
_FLOAT = struct.Struct("<f").pack


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    """The zig-zag varint at `pos` and the position after it (at most 10 bytes)."""
    n = shift = 0
    while True:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            if shift == 63 and b > 1:
                raise ValueError("varint beyond 64 bits")
            return (n >> 1) ^ -(n & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _write_boolean(out: bytearray, value: bool) -> None:
    if type(value) is not bool:
        raise TypeError(f"{type(value).__name__} is not a boolean")
    out.append(1 if value else 0)


def compile_writer(schema: Mapping[str, Any]) -> Writer:
    """The writer of a (fastavro-parsed or plain JSON) record schema: record dict → Avro body.

    Raises `Unsupported` for a schema holding a type it does not compile."""
    return _WriterCode().define(schema)


def compile_reader(schema: Mapping[str, Any]) -> Reader:
    """The reader of bodies written with the (fastavro-parsed or plain JSON) record `schema`:
    (data, start) → (record with plain values, end). Raises `Unsupported` like
    `compile_writer`."""
    return _ReaderCode().define(schema)


class _Code:
    """The source of one generated function, and the names it uses."""

    ROLE = ""  # "writer" or "reader": names the function and its code object

    def __init__(self, env: dict[str, Any]) -> None:
        self._lines: list[str] = []
        self._env = env
        self._named: dict[str, Any] = {}  # named types met so far, by full name
        self._vars = 0

    def _build(self, schema: Mapping[str, Any], signature: str) -> Any:
        """Define `signature` from the lines `_body` emits and returns the function."""
        if schema.get("type") != "record":
            raise Unsupported("only record schemas are compiled")
        self._lines = [f"def {signature}:"]
        try:
            self._lines.append("    " + self._body(schema))
        except RecursionError:
            raise Unsupported("recursive schemas") from None
        where = f"<avro {self.ROLE} of {schema.get('name', 'record')}>"
        exec(compile("\n".join(self._lines), where, "exec"), self._env)  # noqa: S102
        return self._env[signature.split("(")[0]]

    def _body(self, schema: Mapping[str, Any]) -> str:
        """Emit the function's lines; returns its last (the return statement)."""
        raise NotImplementedError

    def _var(self, prefix: str) -> str:
        self._vars += 1
        return f"{prefix}{self._vars}"

    def _emit(self, depth: int, line: str) -> None:
        self._lines.append("    " * depth + line)

    def _resolve(self, schema: Any) -> Any:
        """`schema` as a primitive's name, a union's list, or a record, enum, array or map."""
        while True:
            if isinstance(schema, str):
                if schema not in self._named:
                    return schema
                schema = self._named[schema]
            if isinstance(schema, list):
                return schema
            kind, logical = schema["type"], schema.get("logicalType")
            if logical is not None:
                if (kind, logical) not in _SUPPORTED_LOGICAL:
                    raise Unsupported(f"logical type {logical} on {kind}")
                return kind  # over its plain value
            if kind in ("record", "enum"):
                self._named[schema["name"]] = schema
                return schema
            if kind in ("array", "map"):
                return schema
            if kind == "fixed":
                raise Unsupported("type fixed")
            schema = kind  # {"type": "string"} and the like

    @staticmethod
    def _null_first(branches: list[Any]) -> tuple[int, Any]:
        """(index of null, the other branch) of a ``["null", T]`` or ``[T, "null"]`` union."""
        if len(branches) != 2 or "null" not in branches:
            raise Unsupported("unions other than [null, T]")
        null_index = branches.index("null")
        return null_index, branches[1 - null_index]


class _WriterCode(_Code):
    ROLE = "writer"

    def __init__(self) -> None:
        super().__init__({
            "write_long": write_long,
            "write_int": write_int,
            "write_bytes": write_bytes,
            "write_boolean": _write_boolean,
            "pack_double": _DOUBLE,
            "pack_float": _FLOAT,
            "pack_many": struct.pack,
            "NUMBERS": _NUMBERS,
        })  # fmt: skip

    def define(self, schema: Mapping[str, Any]) -> Writer:
        writer: Writer = self._build(schema, "write(record)")
        return writer

    def _body(self, schema: Mapping[str, Any]) -> str:
        self._emit(1, "out = bytearray()")
        self._type(schema, "record", 1)
        return "return bytes(out)"

    def _type(self, schema: Any, value: str, depth: int) -> None:
        """Lines writing the local `value` of type `schema`."""
        resolved = self._resolve(schema)
        if isinstance(resolved, str):
            self._primitive(resolved, value, depth)
        elif isinstance(resolved, list):
            null_index, other = self._null_first(resolved)
            self._emit(depth, f"if {value} is None:")
            self._emit(depth + 1, f"out.append({2 * null_index})")  # the zig-zag branch index
            self._emit(depth, "else:")
            self._emit(depth + 1, f"out.append({2 * (1 - null_index)})")
            self._type(other, value, depth + 1)
        elif resolved["type"] == "record":
            for field in resolved["fields"]:
                local = self._var("v")
                self._emit(depth, f"{local} = {value}[{field['name']!r}]")
                self._type(field["type"], local, depth)
        elif resolved["type"] == "enum":
            index = self._var("symbols")
            self._env[index] = {s: i for i, s in enumerate(resolved["symbols"])}
            self._emit(depth, f"write_long(out, {index}[{value}])")
        elif resolved["type"] == "array":
            self._array(resolved["items"], value, depth)
        else:
            self._map(resolved["values"], value, depth)

    def _primitive(self, kind: str, value: str, depth: int) -> None:
        # Lengths and small values inline (one byte below 64), the rest through write_long:
        # a call per field was a third of a Reward's write.
        if kind in ("int", "long"):
            self._emit(depth, f"if type({value}) is int and 0 <= {value} < 64:")
            self._emit(depth + 1, f"out.append({value} << 1)")
            self._emit(depth, f"else: write_{kind}(out, {value})")
        elif kind == "string":
            data = self._var("data")
            self._emit(depth, f"{data} = {value}.encode()")
            self._emit(depth, f"if len({data}) < 64: out.append(len({data}) << 1)")
            self._emit(depth, f"else: write_long(out, len({data}))")
            self._emit(depth, f"out += {data}")
        elif kind in ("double", "float"):
            self._emit(depth, f"if type({value}) not in NUMBERS: raise TypeError('not a number')")
            self._emit(depth, f"out += pack_{kind}({value})")
        elif kind == "boolean":
            self._emit(depth, f"write_boolean(out, {value})")
        elif kind == "bytes":
            self._emit(depth, f"write_bytes(out, {value})")
        elif kind == "null":
            self._emit(depth, f"if {value} is not None: raise TypeError('null expected')")
        else:
            raise Unsupported(f"type {kind}")

    def _array(self, items: Any, value: str, depth: int) -> None:
        # One block holding every item, then the empty block (fastavro writes the same).
        self._emit(depth, f"if type({value}) is not list: raise TypeError('not a list')")
        self._emit(depth, f"if {value}:")
        self._emit(depth + 1, f"write_long(out, len({value}))")
        if items in ("double", "float"):
            code = "d" if items == "double" else "f"
            item = self._var("item")
            self._emit(depth + 1, f"for {item} in {value}:")
            self._emit(
                depth + 2, f"if type({item}) not in NUMBERS: raise TypeError('not a number')"
            )
            self._emit(depth + 1, f"out += pack_many('<%d{code}' % len({value}), *{value})")
        else:
            item = self._var("item")
            self._emit(depth + 1, f"for {item} in {value}:")
            self._type(items, item, depth + 2)
        self._emit(depth, "out.append(0)")

    def _map(self, values: Any, value: str, depth: int) -> None:
        self._emit(depth, f"if type({value}) is not dict: raise TypeError('not a dict')")
        self._emit(depth, f"if {value}:")
        self._emit(depth + 1, f"write_long(out, len({value}))")
        key, item = self._var("key"), self._var("item")
        self._emit(depth + 1, f"for {key}, {item} in {value}.items():")
        self._primitive("string", key, depth + 2)
        self._type(values, item, depth + 2)
        self._emit(depth, "out.append(0)")


class _ReaderCode(_Code):
    ROLE = "reader"

    def __init__(self) -> None:
        super().__init__({
            "read_long": read_long,
            "unpack_double": struct.Struct("<d").unpack_from,
            "unpack_float": struct.Struct("<f").unpack_from,
            "unpack_many": struct.unpack_from,
        })  # fmt: skip

    def define(self, schema: Mapping[str, Any]) -> Reader:
        reader: Reader = self._build(schema, "read(data, pos)")
        return reader

    def _body(self, schema: Mapping[str, Any]) -> str:
        self._emit(1, "size = len(data)")
        return f"return {self._type(schema, 1)}, pos"

    def _long(self, target: str, depth: int) -> None:
        """Lines reading a varint into `target` (one byte inline)."""
        self._emit(depth, "b = data[pos]")
        self._emit(depth, "if b < 128:")
        self._emit(depth + 1, f"{target} = (b >> 1) ^ -(b & 1)")
        self._emit(depth + 1, "pos += 1")
        self._emit(depth, "else:")
        self._emit(depth + 1, f"{target}, pos = read_long(data, pos)")

    def _type(self, schema: Any, depth: int) -> str:
        """Lines reading a value of `schema`; returns the local holding it."""
        resolved = self._resolve(schema)
        if isinstance(resolved, str):
            return self._primitive(resolved, depth)
        out = self._var("v")
        if isinstance(resolved, list):
            null_index, other = self._null_first(resolved)
            self._emit(depth, "b = data[pos]")
            self._emit(depth, "pos += 1")
            self._emit(depth, f"if b == {2 * null_index}:")  # the zig-zag branch index
            self._emit(depth + 1, f"{out} = None")
            self._emit(depth, f"elif b == {2 * (1 - null_index)}:")
            self._emit(depth + 1, f"{out} = {self._type(other, depth + 1)}")
            self._emit(depth, "else:")
            self._emit(depth + 1, "raise ValueError('union branch out of range')")
        elif resolved["type"] == "record":
            values = [(f["name"], self._type(f["type"], depth)) for f in resolved["fields"]]
            self._emit(depth, f"{out} = {{" + ", ".join(f"{n!r}: {v}" for n, v in values) + "}")
        elif resolved["type"] == "enum":
            symbols = self._var("symbols")
            self._env[symbols] = tuple(resolved["symbols"])
            self._long(out, depth)
            self._emit(depth, f"if not 0 <= {out} < {len(resolved['symbols'])}: raise IndexError")
            self._emit(depth, f"{out} = {symbols}[{out}]")
        else:
            self._blocks(resolved, out, depth)
        return out

    def _primitive(self, kind: str, depth: int) -> str:
        out = self._var("v")
        if kind in ("int", "long"):
            self._long(out, depth)
        elif kind in ("string", "bytes"):
            self._long("n", depth)
            self._emit(depth, "end = pos + n")
            self._emit(depth, "if n < 0 or end > size: raise EOFError")
            decode = ".decode()" if kind == "string" else ""
            self._emit(depth, f"{out} = data[pos:end]{decode}")
            self._emit(depth, "pos = end")
        elif kind in ("double", "float"):
            self._emit(depth, f"{out} = unpack_{kind}(data, pos)[0]")
            self._emit(depth, f"pos += {8 if kind == 'double' else 4}")
        elif kind == "boolean":
            self._emit(depth, "b = data[pos]")
            self._emit(depth, "if b > 1: raise ValueError('boolean byte above 1')")
            self._emit(depth, f"{out} = b == 1")
            self._emit(depth, "pos += 1")
        elif kind == "null":
            self._emit(depth, f"{out} = None")
        else:
            raise Unsupported(f"type {kind}")
        return out

    def _blocks(self, schema: Mapping[str, Any], out: str, depth: int) -> None:
        """An array or map into `out`: blocks of items until an empty one (a negative count is
        followed by the block's size in bytes, which other writers use to skip)."""
        is_map = schema["type"] == "map"
        count = self._var("count")
        self._emit(depth, f"{out} = {{}}" if is_map else f"{out} = []")
        self._emit(depth, "while True:")
        self._long(count, depth + 1)
        self._emit(depth + 1, f"if {count} == 0: break")
        self._emit(depth + 1, f"if {count} < 0:")
        self._emit(depth + 2, f"{count} = -{count}")
        self._long("_", depth + 2)
        items = schema["values"] if is_map else schema["items"]
        if not is_map and items in ("double", "float"):
            code, width = ("d", 8) if items == "double" else ("f", 4)
            self._emit(depth + 1, f"{out}.extend(unpack_many('<%d{code}' % {count}, data, pos))")
            self._emit(depth + 1, f"pos += {width} * {count}")
            return
        self._emit(depth + 1, f"for _ in range({count}):")
        if is_map:
            key = self._primitive("string", depth + 2)
            value = self._type(items, depth + 2)
            self._emit(depth + 2, f"{out}[{key}] = {value}")
        else:
            self._emit(depth + 2, f"{out}.append({self._type(items, depth + 2)})")
