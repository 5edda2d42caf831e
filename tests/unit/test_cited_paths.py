"""Every file path that the daemon's code and the manual cite names a file that exists. A module renamed
or moved used to leave its citations behind (`benchmark/compare.py` and `benchmark/verdicts.py` were
cited for a year after benchmark/ became measure/ and experiments/). Upstream sources are named as such:
a path under an upstream project's own tree (vllm/, python/sglang/, ...) or listed below."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Where a cited path may start: the repository, the package, the sandbox, the Ansible collection's root.
BASES = (ROOT, ROOT / "daemon", ROOT / "sandbox", ROOT / "contrib/ansible/ansible_collections/k25/ctl")
CITED = re.compile(
    r"(?<![\w./:@-])((?:[\w.-]+/)+[\w.-]+\.(?:py|md|toml|ya?ml|sh|json|service|html|js|css|txt))\b"
)
# Files of other projects, cited with the project's name beside them.
UPSTREAM_TREES = ("vllm/", "python/sglang/", "concurrent/futures/", "moonshotai/")
UPSTREAM_FILES = {
    "docs/advanced_features/server_arguments.md",  # SGLang's documentation
    "docs/features/lora.md",  # vLLM's documentation
    "entrypoints/openai/serving_completions.py",  # vLLM's OpenAI server
    "tests/integration/integration_config.yml",  # ansible-test's file, written by the test that runs it
}


def cited(text: str) -> list[str]:
    return [m.group(1) for m in CITED.finditer(text)]


def exists(path: str, citing: Path) -> bool:
    return any((base / path).exists() for base in (*BASES, citing.parent))


def sources() -> list[Path]:
    return sorted([*ROOT.glob("daemon/**/*.py"), *ROOT.glob("docs/**/*.md")])


def test_every_path_cited_in_the_code_and_the_manual_exists() -> None:
    missing = [
        f"{src.relative_to(ROOT)}: {path}"
        for src in sources()
        for path in cited(src.read_text())
        if not path.startswith(UPSTREAM_TREES) and path not in UPSTREAM_FILES and not exists(path, src)
    ]
    assert not missing, "cited paths that do not exist:\n" + "\n".join(missing)


def test_a_stale_citation_is_found() -> None:
    """The check itself: the citations the renames left behind are found, and upstream ones are not."""
    text = "compared (benchmark/compare.py), judged (experiments/per_request.py); vllm/benchmarks/serve.py"
    paths = cited(text)
    assert paths == ["benchmark/compare.py", "experiments/per_request.py", "vllm/benchmarks/serve.py"]
    here = ROOT / "daemon/experiments/compare.py"
    assert not exists("benchmark/compare.py", here)
    assert exists("experiments/per_request.py", here)
    assert not cited("see https://github.com/vllm-project/vllm/blob/main/vllm/config.py")


def test_the_code_says_what_an_issue_stood_for() -> None:
    """`(#37)` says nothing to a reader without the tracker: the code says in words what it stood for
    (an upstream project's issue keeps its project's name: vllm#16663)."""
    bare = re.compile(r"(?<![\w/#-])(?:#\d{1,3}|[Ii]ssue \d+)\b")
    found = [
        f"{src.relative_to(ROOT)}:{n}: {line.strip()}"
        for src in ROOT.glob("daemon/**/*.py")
        for n, line in enumerate(src.read_text().splitlines(), 1)
        if bare.search(line) and "PR #" not in line
    ]
    assert not found, "\n".join(found)
