"""`sreforge agent`: a reference SRE agent over any OpenAI-compatible chat-completions API.

It drives a model through an incident's MCP tools (alerts, PromQL, logs, deploy
history, the workspace read-only, submit) plus three tools of its own that edit the
workspace and nothing else (`write_file`, `apply_patch`, `read_file`), within a step and
a token budget. The run's harness starts it as `--agent` (the URL and the workspace come
from SREFORGE_MCP_URL and SREFORGE_WORKSPACE) or it is pointed at a `run --mcp` by hand.
It ends when it has submitted, when the model stops calling tools, or when a budget is
spent; whatever it left in the workspace is then the submission.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from mcp import Client

from sreforge.mcp import shape
from sreforge.runtime.ci import PatchRejected, touched_paths

SYSTEM_PROMPT = (
    "You are an on-call site reliability engineer. A production alert is firing. Investigate "
    "with the tools (alerts, PromQL, service logs, deploy history, the source in the "
    "workspace), find what changed and why it hurts, fix the source in the workspace "
    "(write_file or apply_patch), then call submit once. Your fix goes through the service's "
    "own tests and is rolled out under live traffic: it must make the alert clear and stay "
    "clear without breaking anything else. Do not change tests or data. Optionally call "
    "submit_rca with a short root-cause analysis."
)
MAX_TOOL_RESULT_CHARS = 16_000  # what one tool result may add to the conversation

LOCAL_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the workspace (path relative to it).",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Replace (or create) a file of the workspace with `content`.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "apply_patch",
            "description": "Apply a unified diff (a/ and b/ prefixes) to the workspace.",
            "parameters": {
                "type": "object",
                "properties": {"patch": {"type": "string"}},
                "required": ["patch"],
            },
        },
    },
]


class AgentError(RuntimeError):
    """The agent cannot go on: the model's API failed, or a setting is missing."""


@dataclass
class Budget:
    """How far the agent may go: model calls (steps) and tokens, both counted."""

    max_steps: int = 30
    max_tokens: int = 200_000
    steps: int = 0
    tokens: int = 0

    def spent(self) -> str | None:
        if self.steps >= self.max_steps:
            return f"step budget spent ({self.steps} model calls)"
        if self.tokens >= self.max_tokens:
            return f"token budget spent ({self.tokens} tokens)"
        return None


@dataclass
class Workspace:
    """The agent's own edits: only inside `root`, never its .git."""

    root: Path

    def _path(self, raw: str) -> Path:
        rel = shape.workspace_relative(raw)
        root = self.root.resolve()
        target = (root / rel).resolve()
        if not target.is_relative_to(root):
            raise shape.Refused(f"path: {raw!r} leads outside the workspace")
        return target

    def read_file(self, path: str) -> str:
        target = self._path(path)
        if not target.is_file():
            raise shape.Refused(f"path: {path!r} is not a file of the workspace")
        return target.read_text(encoding="utf-8", errors="replace")

    def write_file(self, path: str, content: str) -> str:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return f"wrote {len(content)} characters to {path}"

    def apply_patch(self, patch: str) -> str:
        try:
            paths = touched_paths(patch)
        except PatchRejected as exc:
            raise shape.Refused(f"patch: {exc}") from exc
        if not paths:
            raise shape.Refused("patch: no file headers found (a unified diff with a/ b/)")
        for p in paths:
            self._path(p)
        done = subprocess.run(
            ["git", "apply", "--recount", "--whitespace=nowarn", "-"],
            input=patch.encode("utf-8"),
            cwd=self.root,
            capture_output=True,
            timeout=60,
            check=False,
            env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"},
        )
        if done.returncode != 0:
            raise shape.Refused(f"patch does not apply: {done.stderr.decode(errors='replace')}")
        return f"applied: {', '.join(paths)}"


@dataclass
class ChatModel:
    """An OpenAI-compatible chat-completions endpoint."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 120.0
    session: requests.Session = field(default_factory=requests.Session)

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        url = self.base_url.rstrip("/") + "/chat/completions"
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        body = {"model": self.model, "messages": messages, "tools": tools, "tool_choice": "auto"}
        last: Exception | None = None
        for attempt in range(3):
            try:
                resp = self.session.post(url, json=body, headers=headers, timeout=self.timeout)
                if resp.status_code >= 500 or resp.status_code == 429:
                    last = AgentError(f"model API answered {resp.status_code}")
                    time.sleep(1.0 + attempt)
                    continue
                if resp.status_code != 200:
                    raise AgentError(f"model API answered {resp.status_code}: {resp.text[:300]}")
                return resp.json()
            except (requests.RequestException, ValueError) as exc:
                last = exc
                time.sleep(1.0 + attempt)
        raise AgentError(f"model API at {url} failed: {last}")


def _tool_text(result: Any) -> tuple[str, bool]:
    parts = [getattr(c, "text", "") for c in result.content]
    return "\n".join(p for p in parts if p), bool(result.is_error)


def openai_tools(mcp_tools: list[Any]) -> list[dict[str, Any]]:
    """The MCP tools as chat-completions function tools (their JSON Schemas as parameters)."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description or "",
                "parameters": t.input_schema or {"type": "object", "properties": {}},
            },
        }
        for t in mcp_tools
    ]


async def run_agent(
    mcp_url: str, workspace: Path, model: ChatModel, budget: Budget, say: Any = print
) -> dict[str, Any]:
    """Investigate, edit and submit; returns what happened (steps, tokens, submitted)."""
    async with Client(mcp_url) as client:
        listed = await client.list_tools()
        tools = openai_tools(listed.tools) + LOCAL_TOOLS
        names = {t.name for t in listed.tools}
        brief, _ = _tool_text(await client.call_tool("brief", {}))
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": brief},
        ]
        edits = Workspace(workspace)
        submitted = False
        stop = None
        while not submitted:
            stop = budget.spent()
            if stop is not None:
                break
            reply = await asyncio.to_thread(model.complete, messages, tools)
            budget.steps += 1
            usage = reply.get("usage") or {}
            budget.tokens += int(usage.get("total_tokens") or len(json.dumps(messages)) // 4)
            try:
                message = reply["choices"][0]["message"]
            except (KeyError, IndexError, TypeError) as exc:
                raise AgentError(f"model API answered without a message: {reply!r:.300}") from exc
            calls = message.get("tool_calls") or []
            messages.append(
                {k: v for k, v in message.items() if k in ("role", "content", "tool_calls")}
                | {"role": "assistant"}
            )
            if not calls:
                stop = "the model called no tool"
                break
            for call in calls:
                fn = call.get("function") or {}
                name = str(fn.get("name", ""))
                raw = fn.get("arguments") or "{}"
                try:  # a string of JSON per the API; some servers send the object itself
                    args = raw if isinstance(raw, dict) else json.loads(raw)
                    if not isinstance(args, dict):
                        raise ValueError("arguments are not a JSON object")
                except ValueError as exc:
                    text, error = f"arguments: not valid JSON ({exc})", True
                else:
                    text, error = await _call(client, edits, names, name, args)
                say(f"step {budget.steps}: {name} -> {'error' if error else 'ok'} ({len(text)})")
                if name == "submit" and not error:
                    submitted = True
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call.get("id", ""),
                        "content": shape.cut(
                            ("ERROR: " if error else "") + text, MAX_TOOL_RESULT_CHARS
                        ),
                    }
                )
        return {
            "submitted": submitted,
            "steps": budget.steps,
            "tokens": budget.tokens,
            "stopped": None if submitted else stop,
        }


async def _call(
    client: Any, edits: Workspace, names: set[str], name: str, args: dict[str, Any]
) -> tuple[str, bool]:
    local: dict[str, Callable[..., str]] = {
        "read_file": edits.read_file,
        "write_file": edits.write_file,
        "apply_patch": edits.apply_patch,
    }
    if name in local:
        try:
            return local[name](**args), False
        except shape.Refused as exc:
            return str(exc), True
        except (TypeError, OSError) as exc:
            return f"{name}: {exc}", True
    if name not in names:
        return f"no tool named {name!r}", True
    return _tool_text(await client.call_tool(name, args))


def add_arguments(p: argparse.ArgumentParser) -> None:
    env = os.environ.get
    p.add_argument(
        "--base-url",
        default=env("SREFORGE_AGENT_BASE_URL") or env("OPENAI_BASE_URL"),
        help="the chat-completions API (…/v1); env SREFORGE_AGENT_BASE_URL or OPENAI_BASE_URL",
    )
    p.add_argument(
        "--model",
        default=env("SREFORGE_AGENT_MODEL"),
        help="the model name; env SREFORGE_AGENT_MODEL",
    )
    p.add_argument(
        "--api-key-env",
        default="SREFORGE_AGENT_API_KEY",
        metavar="VAR",
        help="the environment variable holding the API key (default SREFORGE_AGENT_API_KEY, "
        "then OPENAI_API_KEY); never a flag, so it stays out of process listings",
    )
    p.add_argument("--mcp-url", default=env("SREFORGE_MCP_URL"), help="env SREFORGE_MCP_URL")
    p.add_argument(
        "--workspace", type=Path, default=env("SREFORGE_WORKSPACE"), help="env SREFORGE_WORKSPACE"
    )
    p.add_argument("--max-steps", type=int, default=30, help="model calls at most")
    p.add_argument("--max-tokens", type=int, default=200_000, help="tokens at most, all calls")
    p.add_argument("--request-timeout", type=float, default=120.0, metavar="SECONDS")


def cli(args: argparse.Namespace) -> int:
    missing = [
        flag
        for flag, value in (
            ("--base-url", args.base_url),
            ("--model", args.model),
            ("--mcp-url", args.mcp_url),
            ("--workspace", args.workspace),
        )
        if not value
    ]
    if missing:
        print(f"error: {', '.join(missing)}: required (flag or environment)", file=sys.stderr)
        return 2
    if args.max_steps < 1 or args.max_tokens < 1:
        print("error: --max-steps and --max-tokens must be positive", file=sys.stderr)
        return 2
    key = os.environ.get(args.api_key_env) or os.environ.get("OPENAI_API_KEY")
    model = ChatModel(args.base_url, args.model, key, timeout=args.request_timeout)
    budget = Budget(args.max_steps, args.max_tokens)
    try:
        outcome = asyncio.run(
            run_agent(
                args.mcp_url,
                Path(args.workspace),
                model,
                budget,
                say=lambda line: print(line, flush=True),
            )
        )
    except AgentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(outcome), flush=True)
    return 0 if outcome["submitted"] else 1


def main(argv: list[str] | None = None) -> int:
    """`python -m sreforge.mcp.agent`: the same as `sreforge agent`, without loading the
    rest of the command line (it starts faster in a sandbox)."""
    parser = argparse.ArgumentParser(prog="sreforge agent", description=__doc__)
    add_arguments(parser)
    return cli(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
