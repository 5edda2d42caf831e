"""Sweeps: an experiment over one profile's variants, one per combination of its axes (`vary`). A variant
is the base profile's file with the axes' values set, validated as a profile file is, under a unit of its
own (k25-engine@BASE.vN.service: never the base's, which may be parked) and never written to the
profiles folder (promote writes one, under a new name, for the operator to review)."""

from __future__ import annotations

import itertools
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import tomlkit

from daemon.core.errors import InvalidInput
from daemon.core.profile_files import profile_from_data
from daemon.core.profiles import InvalidProfile, LoadedProfile, Profile, SpeculativeConfig, variant_unit
from daemon.engines import engine_for
from daemon.engines.checks import engine_check

Scalar = bool | int | float | str
# What makes a variant its base's twin on the host: it serves on the base's port, under a unit of its own,
# and is measured once and stopped (it never parks).
PARK_KEYS = ("park", "park_level", "park_residual_mib", "park_expose_ok")
FIXED_KEYS = (
    "name",
    "unit",
    "adopt",
    "port",
    "host",
    *PARK_KEYS,
    "command",
    "extra_args",
    "environment",
    "speculative",
)


@dataclass(frozen=True)
class Axis:
    key: str  # as the operator wrote it
    values: tuple[Scalar, ...]
    label: str  # in the variants' names: the key's last part
    path: tuple[str, ...] | None = None  # a profile key, or
    flag: str | None = None  # an engine flag in the command or extra_args
    flag_type: type | None = None
    base: str | None = None  # the base profile's value, as text (None: not set)


@dataclass(frozen=True)
class Variant:
    name: str  # BASE~label=value,label=value
    values: dict[str, Scalar]  # label -> value
    loaded: LoadedProfile
    argv: list[str]
    toml: str  # the variant as a profile file (its unit and name left to promote)


@dataclass
class Sweep:
    base: LoadedProfile
    axes: list[Axis]
    variants: list[Variant]
    notes: list[str] = field(default_factory=list)


def parse_value(text: str) -> Scalar:
    """A value as TOML reads it (2, 0.5, true, "x"), or else the bare text."""
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    return value if isinstance(value, bool | int | float | str) else text


def parse_vary(items: Sequence[str]) -> dict[str, list[Scalar]]:
    """`KEY=V1,V2,...` per axis (the CLI's --vary)."""
    out: dict[str, list[Scalar]] = {}
    for item in items:
        key, eq, values = item.partition("=")
        key = key.strip()
        if not eq or not key or not values.strip():
            raise InvalidInput(
                f"--vary {item!r}: write KEY=V1,V2 (e.g. speculative.num_speculative_tokens=1,2)"
            )
        if key in out:
            raise InvalidInput(f"--vary {key!r} is given twice: list its values once")
        out[key] = [parse_value(v.strip()) for v in values.split(",")]
    return out


def value_text(v: object) -> str:
    """An axis value as the variants' names and the stored base values write it (true/false for a bool)."""
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _text(v: object) -> str | None:
    """A profile value as an axis's values read (None: not set)."""
    return None if v is None else value_text(v)


def _typed(key: str, v: Scalar, want: type) -> str | None:
    """The flag value as text, or None for a bool flag; refuses a value of the wrong type, naming the key."""
    ok = {
        bool: isinstance(v, bool),
        int: isinstance(v, int) and not isinstance(v, bool),
        float: isinstance(v, int | float) and not isinstance(v, bool),
        str: True,
    }[want]
    if not ok:
        raise InvalidInput(f"axis {key!r}: value {value_text(v)!r} is not {want.__name__}")
    return None if want is bool else value_text(v)


def _value_type(text: str | None) -> type:
    """A flag's type from its current value in the command (None: a bool flag, present)."""
    if text is None or text.startswith("--"):
        return bool
    for t in (int, float):
        try:
            t(text)
            return t
        except ValueError:
            pass
    return str


def resolve_axes(base: Profile, vary: Mapping[str, Sequence[Scalar]]) -> list[Axis]:
    """Each key as a profile key or an engine flag; refused, naming the key, when it is neither."""
    engine = engine_for(base)
    axes = []
    for key, values in vary.items():
        if not values:
            raise InvalidInput(f"axis {key!r} has no values")
        if len({(type(v), v) for v in values}) != len(values):
            raise InvalidInput(f"axis {key!r} lists a value twice")
        flag = key if key.startswith("--") else "--" + key.replace("_", "-")
        key_of = engine.flag_keys.get(flag, key)
        parts = tuple(key_of.split("."))
        label = parts[-1].removeprefix("--")
        top, sub = parts[0], parts[1:]
        if top in FIXED_KEYS and not (top == "speculative" and sub):
            raise InvalidInput(
                f"axis {key!r}: {top} cannot vary (a variant serves on its base's port under "
                "a unit of its own and never parks; vary the flags themselves)"
            )
        if top in Profile.model_fields and not sub:
            axes.append(Axis(key, tuple(values), label, path=parts, base=_text(getattr(base, top))))
            continue
        if top == "speculative" and len(sub) == 1 and sub[0] in SpeculativeConfig.model_fields:
            if base.speculative is None:
                raise InvalidInput(f"axis {key!r}: profile {base.name!r} has no [speculative] table")
            current = _text(getattr(base.speculative, sub[0]))
            axes.append(Axis(key, tuple(values), label, path=parts, base=current))
            continue
        argv = base.command if base.command is not None else base.extra_args
        now: str | None = None
        if flag in argv:
            i = argv.index(flag)
            now = argv[i + 1] if i + 1 < len(argv) else None
            want = _value_type(now)
            now = "true" if want is bool else now
        elif base.command is None and flag in engine.tunable_flags:
            want = engine.tunable_flags[flag]
        else:
            where = "the profile's command" if base.command is not None else "extra_args"
            known = ", ".join(sorted(engine.tunable_flags)) or "none"
            raise InvalidInput(
                f"unknown axis {key!r}: not a profile key, not a flag in {where}, and not a "
                f"{engine.name} flag k25-ctl can add (known: {known})"
            )
        for v in values:
            _typed(key, v, want)
        axes.append(Axis(key, tuple(values), label, flag=flag, flag_type=want, base=now))
    return axes


def _set_flag(args: list[str], flag: str, text: str | None, present: bool) -> list[str]:
    """`args` with `flag` set to `text` (None: a bool flag, kept if `present`), replaced in place or added."""
    out = list(args)
    if flag in out:
        i = out.index(flag)
        has_value = i + 1 < len(out) and not out[i + 1].startswith("--")
        del out[i : i + (2 if has_value else 1)]
    else:
        i = len(out)
    new = [flag] if text is None else [flag, text]
    if text is not None or present:
        out[i:i] = new
    return out


def _apply(doc: tomlkit.TOMLDocument, axis: Axis, value: Scalar) -> None:
    if axis.path is not None:
        table: Any = doc
        for part in axis.path[:-1]:
            table = table[part]
        table[axis.path[-1]] = value
        return
    if axis.flag is None or axis.flag_type is None:
        raise ValueError(f"axis {axis.key!r} is neither a profile key nor a flag")
    text = _typed(axis.key, value, axis.flag_type)
    where = "command" if "command" in doc else "extra_args"
    current = [str(a) for a in doc.get(where, [])]
    doc[where] = _set_flag(current, axis.flag, text, bool(value) if text is None else True)


def derive(
    base: LoadedProfile,
    text: str,
    vary: Mapping[str, Sequence[Scalar]],
    *,
    max_variants: int,
    check_paths: bool = False,
) -> Sweep:
    """The variants of `base` (whose file reads `text`), in an order that keeps switches cheap: those that
    read the same weights next to each other, the base's own first."""
    axes = resolve_axes(base.profile, vary)
    count = math.prod(len(a.values) for a in axes)
    if count > max_variants:
        sizes = " x ".join(str(len(a.values)) for a in axes)
        raise InvalidInput(
            f"{count} variants ({sizes}) exceed max_variants {max_variants}: drop values, or "
            "raise K25_MAX_VARIANTS"
        )
    p = base.profile
    engine = engine_for(p)
    sweep = Sweep(base, axes, [])
    seen = {(tuple(engine.argv(p)), tuple(sorted(engine.environment(p).items()))): p.name}
    for combo in itertools.product(*(a.values for a in axes)):
        doc = tomlkit.parse(text)
        for axis, value in zip(axes, combo, strict=True):
            _apply(doc, axis, value)
        values = {a.label: v for a, v in zip(axes, combo, strict=True)}
        name = f"{p.name}~" + ",".join(f"{k}={value_text(v)}" for k, v in values.items())
        data = doc.unwrap()  # plain objects, apart from the document
        for key in PARK_KEYS:
            data.pop(key, None)
        data |= {"name": p.name, "unit": variant_unit(p.name, len(sweep.variants) + 1)}
        item = profile_from_data(
            base.file, p.name, data, base.sha256, check_paths=check_paths, engine_check=engine_check
        )
        if isinstance(item, InvalidProfile):
            why = "; ".join(f"key {q.key!r}: {q.message}" for q in item.problems)
            raise InvalidInput(f"variant {name}: {why}")
        profile = item.profile.model_copy(update={"name": name, "port": p.port})
        same = (tuple(engine.argv(profile)), tuple(sorted(engine.environment(profile).items())))
        if same in seen:
            sweep.notes.append(f"{name} runs exactly as {seen[same]}: measured once, as {seen[same]}")
            continue
        seen[same] = name
        for key in ("unit", "name"):
            doc.pop(key, None)
        loaded = LoadedProfile(profile, base.file, base.sha256)
        sweep.variants.append(Variant(name, values, loaded, engine.argv(profile), tomlkit.dumps(doc)))
    weights = (p.model, p.speculative.draft_model if p.speculative else None)

    def order(v: Variant) -> bool:
        q = v.loaded.profile
        return (q.model, q.speculative.draft_model if q.speculative else None) != weights

    sweep.variants.sort(key=order)  # stable: the product's order within each group
    return sweep
