"""A network-level TEST DOUBLE of a model's API: a scripted OpenAI-compatible chat-completions
server on loopback.

No model can run here, so the reference agent (`sreforge agent`) is driven by this real
HTTP server speaking the chat-completions JSON (`POST /v1/chat/completions`, `tool_calls`,
`usage`). Each answer is the next step of a script: the tool calls a model would make. It
is a double of the model only: the agent, its MCP session, the tools, the run and the
grading are all real. It keeps every request it received, so a test can check that the
agent sent the tools and fed each tool's result back.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class ScriptedChatCompletions:
    """Answers the i-th request with `steps[i]`: a list of (tool, arguments) calls, or a text."""

    steps: list[list[tuple[str, dict[str, Any]]] | str]
    requests: list[dict[str, Any]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        index = len(self.requests)
        self.requests.append(body)
        step = self.steps[index] if index < len(self.steps) else "I have nothing more to do."
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if isinstance(step, str):
            message["content"] = step
            finish = "stop"
        else:
            message["tool_calls"] = [
                {
                    "id": f"call_{index}_{n}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for n, (name, args) in enumerate(step)
            ]
            finish = "tool_calls"
        prompt = len(json.dumps(body["messages"])) // 4
        return {
            "id": f"chatcmpl-{index}",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": 20,
                "total_tokens": prompt + 20,
            },
        }

    def start(self) -> ScriptedChatCompletions:
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                try:
                    body = json.loads(self.rfile.read(length))
                    ok = self.path == "/v1/chat/completions" and isinstance(body, dict)
                    ok = ok and isinstance(body.get("messages"), list) and "tools" in body
                except ValueError:
                    ok = False
                if not ok:
                    self.send_response(400)
                    self.end_headers()
                    return
                data = json.dumps(double.answer(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def tool_results(self) -> list[str]:
        """Every tool result the agent sent back, in order."""
        last = self.requests[-1]["messages"] if self.requests else []
        return [m["content"] for m in last if m.get("role") == "tool"]
