"""Child processes for the tests that SIGKILL a build: each is forked from a zygote process that
imported the product and loaded the SPLADE model once (~13 s of CPU a child otherwise). A child
still runs its script in a process of its own, from the zygote's state, with its own environment.

Forking is safe because the zygote starts no thread pool: the dense ONNX session, which does, is
loaded by each child.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_ZYGOTE = """
import json, os, signal, sys, time, traceback
import retrieval_assets.runs
from retrieval_assets.defs.resources import ModelResource

ModelResource().sparse_encoder()
print("ready", flush=True)
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.environ.update(request["env"])
        sys.argv = ["-c", *request["args"]]
        status = 0
        try:
            exec(compile(request["script"], "<child>", "exec"), {"__name__": "__main__"})
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else 1
        except BaseException:
            traceback.print_exc()
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    deadline = time.monotonic() + request["timeout_s"]
    while not (waited := os.waitpid(pid, os.WNOHANG))[0] and time.monotonic() < deadline:
        time.sleep(0.05)
    if not waited[0]:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        print("timeout", flush=True)
    else:
        print(os.waitstatus_to_exitcode(waited[1]), flush=True)
"""


@dataclass(frozen=True)
class Exited:
    returncode: int  # negative: killed by that signal, as subprocess reports it
    output: str  # the child's stdout and stderr


class Zygote:
    def __init__(self, logs: Path) -> None:
        self._logs = logs
        self._runs = 0
        # Started now, waited for at the first run: it loads while the caller's fixtures build.
        self._process = subprocess.Popen(
            [sys.executable, "-c", _ZYGOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self._ready = False

    def run(self, script: str, *args: str, env: dict[str, str], timeout_s: float = 600) -> Exited:
        """``python -c script *args`` with ``env`` added to the zygote's environment; a child
        still running after ``timeout_s`` is killed and fails the test."""
        while not self._ready:
            self._ready = self._readline() == "ready"  # after anything the imports printed
        self._runs += 1
        log = self._logs / f"child-{self._runs}.log"
        request = {"script": script, "args": list(args), "env": env, "log": str(log), "timeout_s": timeout_s}
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        returncode = self._readline()
        output = log.read_text(errors="replace") if log.exists() else ""
        assert returncode != "timeout", f"child still running after {timeout_s} s, killed:\n{output[-3000:]}"
        return Exited(int(returncode), output)

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(timeout=60)

    def _readline(self) -> str:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        assert line, f"the zygote exited: {self._process.poll()}"
        return line.strip()
