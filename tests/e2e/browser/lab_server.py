"""A JupyterLab server of the browser test's own: free port, random token, settings kept apart.

The server serves the repository root (notebooks find ``pyproject.toml`` by
searching upward from their folder) and answers only on 127.0.0.1. Its
settings, workspaces and runtime files live in a temporary folder, so a
developer's own JupyterLab set-up neither changes what the test sees nor is
changed by it.
"""
from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

#: User settings for the test's Lab: every cell stays in the DOM (no windowing, so
#: the test sees all outputs), and no news or update checks (no network, no toasts).
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}


def free_port() -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_lab_settings(settings_dir: Path) -> None:
    """Write :data:`LAB_SETTINGS` where JupyterLab reads user settings."""
    for plugin, values in LAB_SETTINGS.items():
        package, name = plugin.rsplit("/", 1)
        path = settings_dir / package / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


class LabServer:
    """``python -m jupyter lab`` in a subprocess; :meth:`stop` terminates it, then kills it."""

    def __init__(self, root: Path, state_dir: Path):
        self.root = root
        self.state_dir = state_dir
        self.port = free_port()
        self.token = secrets.token_hex(24)
        self.log_path = state_dir / "jupyterlab.log"
        self.process: subprocess.Popen | None = None

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={self.port}",
               f"--ServerApp.token={self.token}", f"--ServerApp.root_dir={self.root}",
               "--ServerApp.ip=127.0.0.1",
               # the notebook copies live in a dot-folder, which Jupyter hides unless told otherwise
               "--ContentsManager.allow_hidden=True",
               # window.jupyterapp: the test opens the committed notebooks one after another through the app's
               # own commands in one loaded page, instead of loading JupyterLab again for each
               "--LabApp.expose_app_in_browser=True"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI containers run as root
            cmd.append("--allow-root")
        return cmd

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        # JUPYTER_DATA_DIR holds the notebook signatures (which notebooks are trusted) and their key
        for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTERLAB_SETTINGS_DIR", "settings"),
                         ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                         ("JUPYTER_DATA_DIR", "data")):
            env[var] = str(self.state_dir / sub)
        return env

    def trust(self, notebooks: list[Path]) -> None:
        """Sign ``notebooks`` with this server's key (``jupyter trust``), as a user trusts a notebook: JupyterLab
        renders a trusted notebook's stored outputs in full (widgets from their saved state, HTML), an untrusted
        one's only in their safe forms."""
        if not notebooks:
            return
        proc = subprocess.run([sys.executable, "-m", "jupyter", "trust", *map(str, notebooks)],
                              env=self.environment(), capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"jupyter trust failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")

    def start(self, timeout_s: float = 120) -> None:
        """Start the server and return once its REST API answers."""
        write_lab_settings(self.state_dir / "settings")
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(self.command(), cwd=self.root, env=self.environment(),
                                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while not self._answers():
            if self.process.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with code {self.process.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"JupyterLab did not answer within {timeout_s:.0f} s:\n{self.log_tail()}")
            time.sleep(0.2)  # polling the port is the wait: nothing else says it is up

    def _answers(self) -> bool:
        try:
            self.api("GET", "/api/status")
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False
        return True

    def url(self, path: str) -> str:
        """``path`` on this server, with the token (the page keeps it as a cookie)."""
        sep = "&" if "?" in path else "?"
        return f"http://127.0.0.1:{self.port}{path}{sep}token={self.token}"

    def api(self, method: str, path: str, payload: Any = None) -> Any:
        """One REST call (with ``payload`` as its JSON body); the decoded JSON answer (None when it is empty)."""
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method, data=data,
                                         headers={"Authorization": f"token {self.token}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            body = answer.read()
        return json.loads(body) if body else None

    def a_kernel(self) -> str:
        """The id of a running kernel, started if none runs: the notebooks opened as committed all connect to it
        (ipywidgets renders a notebook's saved widgets only once a kernel is connected, and which kernel does not
        matter to a render; one start instead of one per notebook)."""
        running = self.api("GET", "/api/kernels")
        if running:
            return running[0]["id"]
        return self.api("POST", "/api/kernels", {"name": "python3"})["id"]

    def shutdown_kernels(self) -> None:
        """Shut every kernel down, so one notebook's kernel does not hold memory during the next."""
        for kernel in self.api("GET", "/api/kernels"):
            self.api("DELETE", f"/api/kernels/{kernel['id']}")

    def stop(self, grace_s: float = 15) -> None:
        """Terminate the server (it shuts its kernels down); kill it if it does not exit in time."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=grace_s)

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
