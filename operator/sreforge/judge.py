"""Best-effort RCA judging: ask a separate judge model about a run's RCA, write diagnosis.json.

The judge is any OpenAI-compatible chat-completions API, configured by environment:

    RCA_JUDGE_URL              base URL, e.g. http://127.0.0.1:8000/v1; POST {base}/chat/completions
    RCA_JUDGE_MODEL            the judge model's name
    RCA_JUDGE_API_KEY          sent as `Authorization: Bearer ...` when set
    RCA_JUDGE_TIMEOUT_SECONDS  total deadline for one judge call (default 60)

A model never grades its own RCA: when the judge model is the model under test
(`submission.agentModel` of the run record, or `SREFORGE_AGENT_MODEL`) judging is refused.

Two entry points: `judge_record` takes a `RunRecord` and the RCA's text and returns the
diagnosis (the operator, which has both in memory); `judge_run` reads a run directory's
record.json and the RCA file it names, and writes diagnosis.json beside them (the CLI).

Best-effort: anything that prevents a diagnosis (no judge, no RCA, judge down, HTTP
error, timeout, unparseable answer) logs ONE `warning: diagnosis skipped: ...` line,
writes no diagnosis.json and raises nothing. record.json is only ever read: the
diagnosis sits beside the verdict and never changes it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import tempfile
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sreforge.api.diagnosis import Diagnosis, JudgeAnswerError, build_messages, parse_answer
from sreforge.api.record import RunRecord

RECORD_FILE = "record.json"
DIAGNOSIS_FILE = "diagnosis.json"
TRUTH_FILE = "root_cause.md"
WARNING_PREFIX = "warning: diagnosis skipped: "
DEFAULT_TIMEOUT_SECONDS = 60.0
MAX_RCA_BYTES = 256 * 1024
MAX_RESPONSE_BYTES = 4 * 1024 * 1024


def _warn(line: str) -> None:
    print(line, file=sys.stderr)


class _Skipped(Exception):
    """A reason not to write a diagnosis; its message becomes the one warning line."""


class _Ref(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class _ScenarioRef(_Ref):
    path: str = Field(min_length=1)


class _SubmissionRef(_Ref):
    agent_model: str | None = Field(default=None, alias="agentModel")
    rca: str | None = None


class _Judged(_Ref):
    """What the judge reads of a run record: its id, the scenario (for the truth), the
    model under test and the RCA's file name."""

    run_id: str = Field(alias="runId", min_length=1)
    scenario: _ScenarioRef
    submission: _SubmissionRef | None = None

    @classmethod
    def of(cls, record: RunRecord) -> _Judged:
        return cls(
            run_id=record.run_id,
            scenario=_ScenarioRef(path=record.scenario.path),
            submission=_SubmissionRef(
                agent_model=record.submission.agent_model, rca=record.submission.rca
            ),
        )


@dataclass(frozen=True)
class _JudgeConfig:
    base_url: str
    model: str
    api_key: str | None
    timeout_seconds: float

    @property
    def endpoint(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    @property
    def shown_endpoint(self) -> str:
        # Never echo credentials embedded in the URL into a log line.
        parts = urlsplit(self.endpoint)
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _config_from_env(env: Mapping[str, str]) -> _JudgeConfig:
    base_url = env.get("RCA_JUDGE_URL", "").strip()
    model = env.get("RCA_JUDGE_MODEL", "").strip()
    missing = [
        name
        for name, value in (("RCA_JUDGE_URL", base_url), ("RCA_JUDGE_MODEL", model))
        if not value
    ]
    if missing:
        raise _Skipped(f"no judge configured ({' and '.join(missing)} unset)")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _Skipped("RCA_JUDGE_URL is not an http(s) URL")
    raw_timeout = env.get("RCA_JUDGE_TIMEOUT_SECONDS", "").strip()
    timeout = DEFAULT_TIMEOUT_SECONDS
    if raw_timeout:
        try:
            timeout = float(raw_timeout)
        except ValueError:
            timeout = math.nan
        if not 0 < timeout < math.inf:
            raise _Skipped(
                f"RCA_JUDGE_TIMEOUT_SECONDS must be a positive number, got {raw_timeout!r}"
            )
    api_key = env.get("RCA_JUDGE_API_KEY", "").strip() or None
    return _JudgeConfig(base_url=base_url, model=model, api_key=api_key, timeout_seconds=timeout)


def _read_record(run_dir: Path) -> _Judged:
    """record.json through the RunRecord model. A file holding only the fields the judge
    reads (a stand-in some callers and tests still write) is judged from those."""
    path = run_dir / RECORD_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise _Skipped(f"no {RECORD_FILE} in {run_dir}") from None
    except OSError as e:
        raise _Skipped(f"cannot read {path}: {e.strerror or e}") from None
    try:
        return _Judged.of(RunRecord.model_validate_json(raw))
    except ValidationError:
        pass
    try:
        return _Judged.model_validate_json(raw)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "record"
        raise _Skipped(f"{path} is not a run record ({where}: {first['msg']})") from None


def _model_identity(name: str) -> str:
    # "openai/GPT-4o" and "gpt-4o" are the same model for the self-judging rule.
    return name.strip().casefold().rsplit("/", 1)[-1]


def _refuse_self_judging(config: _JudgeConfig, record: _Judged, env: Mapping[str, str]) -> None:
    recorded = record.submission.agent_model if record.submission else None
    candidates = {
        "record.json submission.agentModel": recorded,
        "SREFORGE_AGENT_MODEL": env.get("SREFORGE_AGENT_MODEL"),
    }
    judge = _model_identity(config.model)
    for source, agent_model in candidates.items():
        if agent_model and agent_model.strip() and _model_identity(agent_model) == judge:
            raise _Skipped(
                f"judge model {config.model!r} is the model under test ({source}); "
                "a model may not grade its own RCA"
            )


def _read_rca(run_dir: Path, record: _Judged) -> str:
    name = record.submission.rca if record.submission else None
    if not name:
        raise _Skipped("no RCA submitted")
    path = run_dir / name
    if not path.resolve().is_relative_to(run_dir.resolve()):
        raise _Skipped(f"RCA path {name!r} leaves the run directory")
    try:
        size = path.stat().st_size
        if size > MAX_RCA_BYTES:
            raise _Skipped(f"RCA {name} is too large ({size} bytes > {MAX_RCA_BYTES})")
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise _Skipped(f"RCA file {name} is missing from {run_dir}") from None
    except OSError as e:
        raise _Skipped(f"cannot read RCA {path}: {e.strerror or e}") from None
    return _checked_rca(text, name)


def _checked_rca(text: str | None, name: str) -> str:
    if text is None:
        raise _Skipped("no RCA submitted")
    size = len(text.encode("utf-8"))
    if size > MAX_RCA_BYTES:
        raise _Skipped(f"RCA {name} is too large ({size} bytes > {MAX_RCA_BYTES})")
    if not text.strip():
        raise _Skipped(f"RCA {name} is empty")
    return text


def _read_truth(record: _Judged) -> str:
    path = Path(record.scenario.path) / TRUTH_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise _Skipped(f"cannot read the scenario's truth {path}: {e.strerror or e}") from None
    if not text.strip():
        raise _Skipped(f"the scenario's truth {path} is empty")
    return text


def _excerpt(raw: bytes | str, limit: int = 160) -> str:
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[:limit] + "...")


async def _read_capped(response: aiohttp.ClientResponse) -> bytes:
    body = bytearray()
    async for chunk in response.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > MAX_RESPONSE_BYTES:
            raise _Skipped(f"judge response is larger than {MAX_RESPONSE_BYTES} bytes")
    return bytes(body)


async def _ask(config: _JudgeConfig, messages: list[dict[str, str]]) -> str:
    """POST one chat completion and return the message content, or raise _Skipped."""
    body: dict[str, Any] = {
        "model": config.model,
        "messages": messages,
        "temperature": 0,
        "response_format": {"type": "json_object"},
    }
    headers = {"Accept": "application/json"}
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key}"
    # A total deadline: a judge that trickles bytes cannot hold the run past it.
    timeout = aiohttp.ClientTimeout(total=config.timeout_seconds)
    where = config.shown_endpoint
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(config.endpoint, json=body, headers=headers) as response,
        ):
            status = response.status
            raw = await _read_capped(response)
    except TimeoutError:
        raise _Skipped(
            f"judge at {where} did not answer within {config.timeout_seconds:g}s"
        ) from None
    except aiohttp.ClientError as e:
        raise _Skipped(f"judge unreachable at {where} ({type(e).__name__}: {e})") from None
    if not 200 <= status < 300:
        raise _Skipped(f"judge at {where} returned HTTP {status}: {_excerpt(raw)}")
    return _completion_content(raw)


def _completion_content(raw: bytes) -> str:
    try:
        payload = json.loads(raw)
    except ValueError:
        raise _Skipped(f"judge response is not JSON: {_excerpt(raw)}") from None
    try:
        message = payload["choices"][0]["message"]
        content = message["content"]
    except (KeyError, IndexError, TypeError):
        raise _Skipped(
            "judge response is not a chat completion (no choices[0].message.content): "
            + _excerpt(raw)
        ) from None
    if not isinstance(content, str):
        refusal = message.get("refusal") if isinstance(message, dict) else None
        if refusal:
            raise _Skipped(f"judge refused to answer: {_excerpt(str(refusal))}")
        raise _Skipped("judge response has no text content")
    return content


def _write_atomically(path: Path, text: str) -> None:
    # tmp + rename in the same directory: readers see the old file or the whole new one.
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


async def _diagnose(config: _JudgeConfig, record: _Judged, rca: str) -> Diagnosis:
    truth = _read_truth(record)
    content = await _ask(config, build_messages(truth, rca))
    try:
        answer = parse_answer(content)
    except JudgeAnswerError as e:
        raise _Skipped(str(e)) from None
    return Diagnosis.from_answer(
        answer, judge_model=config.model, judged_at=datetime.now(UTC), run_id=record.run_id
    )


async def _judge_record(record: RunRecord, rca: str | None, env: Mapping[str, str]) -> Diagnosis:
    config = _config_from_env(env)
    judged = _Judged.of(record)
    _refuse_self_judging(config, judged, env)
    return await _diagnose(config, judged, _checked_rca(rca, "text"))


async def _judge_run(run_dir: Path, env: Mapping[str, str]) -> Diagnosis:
    config = _config_from_env(env)
    record = _read_record(run_dir)
    _refuse_self_judging(config, record, env)
    diagnosis = await _diagnose(config, record, _read_rca(run_dir, record))
    target = run_dir / DIAGNOSIS_FILE
    try:
        _write_atomically(target, diagnosis.model_dump_json(by_alias=True, indent=2) + "\n")
    except OSError as e:
        raise _Skipped(f"cannot write {target}: {e.strerror or e}") from None
    return diagnosis


def _one_line(text: str, limit: int = 400) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


async def _best_effort(
    judging: Coroutine[Any, Any, Diagnosis], log: Callable[[str], None]
) -> Diagnosis | None:
    try:
        return await judging
    except _Skipped as skipped:
        log(WARNING_PREFIX + _one_line(str(skipped)))
    except Exception as e:  # a diagnosis must never fail a run, whatever went wrong
        log(WARNING_PREFIX + _one_line(f"unexpected {type(e).__name__}: {e}"))
    return None


def _run_sync(judging: Coroutine[Any, Any, Diagnosis | None]) -> Diagnosis | None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(judging)
    # Inside a running event loop (e.g. an async handler) a nested asyncio.run is illegal.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sreforge-judge") as pool:
        return pool.submit(asyncio.run, judging).result()


async def judge_record_async(
    record: RunRecord,
    rca: str | None,
    *,
    env: Mapping[str, str] | None = None,
    log: Callable[[str], None] = _warn,
) -> Diagnosis | None:
    """Judge `rca`, the RCA submitted for the run `record` describes; return the diagnosis
    or None. Nothing is read but the scenario's truth, nothing is written.

    Best-effort: on any reason not to judge, log one warning line and return None.
    """
    return await _best_effort(_judge_record(record, rca, os.environ if env is None else env), log)


def judge_record(
    record: RunRecord,
    rca: str | None,
    *,
    env: Mapping[str, str] | None = None,
    log: Callable[[str], None] = _warn,
) -> Diagnosis | None:
    """Synchronous `judge_record_async`."""
    return _run_sync(judge_record_async(record, rca, env=env, log=log))


async def judge_run_async(
    run_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    log: Callable[[str], None] = _warn,
) -> Diagnosis | None:
    """Judge the RCA of the run in `run_dir`; write and return its diagnosis, or None.

    Best-effort: on any reason not to judge, log one warning line and return None.
    """
    return await _best_effort(_judge_run(Path(run_dir), os.environ if env is None else env), log)


def judge_run(
    run_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    log: Callable[[str], None] = _warn,
) -> Diagnosis | None:
    """Synchronous `judge_run_async`: judge the run's RCA, write diagnosis.json, or warn once."""
    return _run_sync(judge_run_async(run_dir, env=env, log=log))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `sreforge judge RUN_DIR`."""
    parser.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        type=Path,
        help="a run directory holding record.json and the RCA it names",
    )


def _table(diagnosis: Diagnosis, written: Path) -> str:
    def points(earned: bool, weight: float) -> str:
        return f"+{weight if earned else 0.0:.1f}"

    rows = [
        ("run", diagnosis.run_id),
        (
            "root cause",
            f"{'correct' if diagnosis.root_cause_correct else 'wrong':<12}"
            f"{points(diagnosis.root_cause_correct, 0.6)}",
        ),
        (
            "evidence",
            f"{'grounded' if diagnosis.evidence_grounded else 'ungrounded':<12}"
            f"{points(diagnosis.evidence_grounded, 0.3)}",
        ),
        (
            "false leads",
            f"{'yes' if diagnosis.false_leads else 'none':<12}"
            f"{points(not diagnosis.false_leads, 0.1)}",
        ),
        ("score", f"{diagnosis.score:.1f}  (beside the verdict, never in it)"),
        ("judge", f"{diagnosis.judge_model} at {diagnosis.judged_at}"),
        ("rationale", _one_line(diagnosis.rationale, 200)),
        ("written", str(written)),
    ]
    return "\n".join(f"{label:<12} {value}" for label, value in rows)


def cli(args: argparse.Namespace) -> int:
    """`sreforge judge RUN_DIR`: 0 when written or skipped best-effort, 2 without record.json."""
    run_dir: Path = args.run_dir
    if not (run_dir / RECORD_FILE).is_file():
        print(f"error: {run_dir} has no {RECORD_FILE}", file=sys.stderr)
        return 2
    diagnosis = judge_run(run_dir)
    if diagnosis is not None:
        print(_table(diagnosis, run_dir / DIAGNOSIS_FILE))
    return 0


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="sreforge judge", description=__doc__.splitlines()[0])
    add_arguments(_parser)
    sys.exit(cli(_parser.parse_args()))
