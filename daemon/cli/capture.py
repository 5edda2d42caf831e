"""CLI commands for captured traffic and datasets: `capture status | export FILE | purge` and
`datasets [list] | show NAME | import NAME FILE | create NAME --from-capture | delete NAME`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from daemon.cli.client import ApiJson
from daemon.cli.exit_codes import EXIT_OK
from daemon.cli.remote import Add, client, emit, figure
from daemon.core.errors import InvalidInput


def capture(args: argparse.Namespace) -> int:
    c = client(args)
    if args.action == "purge":
        data = c.delete("/capture")
        emit(args, data, f"deleted {data['deleted']} captured request(s)")
        return EXIT_OK
    if args.action == "export":
        if args.file is None:
            raise InvalidInput("capture export FILE: where to write the JSON lines")
        fd = os.open(args.file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # production prompts
        with os.fdopen(fd, "wb") as out:
            n = c.download("/capture/export", out)
        emit(args, {"file": str(args.file), "requests": n}, f"{n} captured request(s) written to {args.file}")
        return EXIT_OK
    st = c.get("/capture")
    counts = st["since_start"]
    cats = ", ".join(f"{k} {v}" for k, v in st["categories"].items()) or "-"
    lines = [
        f"capture   {'on' if st['enabled'] else 'off'}"
        + (
            ""
            if st["token_configured"] or not st["enabled"]
            else " (no capture token: every request refused)"
        ),
        f"sample    {st['sample_rate']:g} of mirrored requests",
        f"kept      {st['rows']} request(s), {st['bytes']} bytes (caps {st['max_rows']} / {st['max_bytes']} "
        f"bytes, {st['retention_days']:g} days)",
        f"span      {st['oldest'] or '-'} .. {st['newest'] or '-'}",
        f"category  {cats}",
        f"since start: {counts['received']} received, {counts['kept']} kept, {counts['sampled_out']} sampled "
        f"out, {counts['rejected']} rejected, {counts['too_large']} too large, "
        f"{counts['dropped_pending'] + counts['dropped_caps']} dropped",
    ]
    emit(args, st, "\n".join(lines))
    return EXIT_OK


def datasets(args: argparse.Namespace) -> int:
    c = client(args)
    action, name = args.action, args.name
    if action in ("show", "import", "create", "delete") and not name:
        raise InvalidInput(f"datasets {action} NAME: which dataset")
    if action == "import":
        if args.file is None:
            raise InvalidInput("datasets import NAME FILE: the file to import")
        try:
            data = args.file.read_bytes()
        except OSError as e:
            raise InvalidInput(f"cannot read {args.file}: {e.strerror}") from e
        return _shown(args, c.upload("/datasets", data, name=name, format=args.format), "imported")
    if action == "create":
        if not args.from_capture:
            raise InvalidInput("datasets create NAME --from-capture [--since T] [--until T] [--category C]")
        body: ApiJson = {"name": name, "since": args.since, "until": args.until, "categories": args.category}
        _, out = c.post("/datasets/from-capture", body)
        return _shown(args, out, "made from the capture")
    if action == "delete":
        out = c.delete(f"/datasets/{name}")
        emit(args, out, f"dataset {name} deleted ({out['prompts']} prompts)")
        return EXIT_OK
    if action == "show":
        return _shown(args, c.get(f"/datasets/{name}"), "")
    items = c.get("/datasets")
    lines = [
        f"{d['name']:24} {d['source']:9} {d['prompts']:>7} prompts  "
        + ", ".join(f"{k} {v}" for k, v in d["categories"].items())
        for d in items
    ]
    emit(args, items, "\n".join(lines) or "no datasets (k25-ctl datasets import NAME FILE)")
    return EXIT_OK


def _shown(args: argparse.Namespace, d: ApiJson, verb: str) -> int:
    cats = ", ".join(f"{k} {v}" for k, v in d["categories"].items())
    window = f"\n  window   {d['window_start']} .. {d['window_end']}" if d.get("window_start") else ""
    text = (
        f"dataset {d['name']}{' ' + verb if verb else ''}: {d['prompts']} prompts from {d['source']}, "
        f"hash {d['sha256']}\n  category {cats}\n  lengths  {d['lengths']}"
        + (f" (mean {figure(d['output_mean'], '.0f')})" if d.get("output_mean") else "")
        + window
    )
    emit(args, d, text)
    return EXIT_OK


def add_commands(add: Add) -> None:
    p = add("capture", capture, "mirrored production requests: status, export FILE, purge")
    p.add_argument("action", nargs="?", choices=("status", "export", "purge"), default="status")
    p.add_argument("file", nargs="?", type=Path, help="export: where to write the JSON lines (mode 0600)")
    p = add("datasets", datasets, "prompt sets to replay: list, show, import, create --from-capture, delete")
    p.add_argument(
        "action", nargs="?", choices=("list", "show", "import", "create", "delete"), default="list"
    )
    p.add_argument("name", nargs="?")
    p.add_argument("file", nargs="?", type=Path, help="import: an OpenAI-format JSONL or a ShareGPT JSON")
    p.add_argument("--format", choices=("openai", "sharegpt"), help="import: default from the file")
    p.add_argument("--from-capture", action="store_true", help="create: from the captured requests")
    p.add_argument("--since", help="create: the window's start (ISO 8601)")
    p.add_argument("--until", help="create: the window's end (ISO 8601)")
    p.add_argument("--category", action="append", default=[], help="create: only this category (repeat)")
