"""Bounded JSON parsing for every byte string that arrives from the network.

``json.loads`` recurses once per nesting level, in C: about 120,000 nested ``[`` overflow the C
stack and kill the process (SIGSEGV) when the interpreter's recursion limit is high (``py_ecc``,
imported through web3, raises it to 100,000; :mod:`syncline` puts it back). Every format Syncline
reads from peers (safetensors headers, checkpoint headers and manifests, spec artifacts, gossip
messages, trainer reports, API request bodies) is shallow, so :func:`load_bounded_json` checks the
size and scans the nesting depth of the raw bytes before parsing them, and turns every failure,
including a ``RecursionError``, into one :class:`WireFormatError`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from syncline.errors import SynclineError

MAX_JSON_DEPTH = 32
"""Default nesting bound: the deepest format the protocol defines is a handful of levels."""

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*(?:"|\\?\Z)', re.DOTALL)
"""A JSON string, or an unterminated one running to the end (so every quote starts a match and the
scan stays linear; the parser fails at an unterminated string before reaching what follows it)."""
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class WireFormatError(SynclineError, ValueError):
    """Bytes from the network are not the bounded JSON the protocol expects (one line)."""


def json_depth(data: bytes, *, limit: int) -> int:
    """The nesting depth of the JSON text ``data``, counted on the raw bytes (strings skipped).

    Counting stops as soon as ``limit`` is exceeded (the result is then ``limit + 1``), so the cost
    is linear in ``len(data)`` whatever the input. Unbalanced or invalid text gives a depth too;
    the parser rejects it afterwards.
    """
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for byte in brackets:
        if byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        else:
            depth -= 1
    return deepest


def check_bounded_json(
    data: bytes | bytearray | memoryview | str, *, max_bytes: int, max_depth: int, what: str
) -> bytes:
    """Check size and nesting of raw JSON bytes without parsing them; returns them as ``bytes``.

    Raises
    ------
    WireFormatError
        ``data`` is longer than ``max_bytes`` or nests deeper than ``max_depth``.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise WireFormatError(f"{what} is {len(raw)} bytes, more than the limit of {max_bytes}")
    depth = json_depth(raw, limit=max_depth)
    if depth > max_depth:
        raise WireFormatError(f"{what} nests deeper than {max_depth} levels")
    return raw


def load_bounded_json(
    data: bytes | bytearray | memoryview | str,
    *,
    max_bytes: int,
    max_depth: int = MAX_JSON_DEPTH,
    what: str = "JSON",
) -> Any:
    """Parse JSON from an untrusted source after bounding its size and nesting.

    Parameters
    ----------
    data
        The raw bytes (or text) received.
    max_bytes
        Largest accepted input, checked before anything else.
    max_depth
        Deepest accepted nesting of arrays and objects, checked on the raw bytes before parsing.
    what
        Names the input in error messages (``"safetensors header"``).

    Returns
    -------
    Any
        The parsed value.

    Raises
    ------
    WireFormatError
        One line: too large, too deep, not UTF-8, or not JSON.
    """
    raw = check_bounded_json(data, max_bytes=max_bytes, max_depth=max_depth, what=what)
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:  # unreachable after the depth check; kept as a last line of defence
        raise WireFormatError(f"{what} nests too deeply to parse") from None
    except UnicodeDecodeError:
        raise WireFormatError(f"{what} is not JSON: not UTF-8") from None
    except ValueError as exc:  # JSONDecodeError, and int() refusing a number of > 4300 digits
        raise WireFormatError(f"{what} is not JSON: {' '.join(str(exc).split())[:120]}") from None
